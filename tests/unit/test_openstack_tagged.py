"""The openstack driver's list_tagged, against a stand-in of openstacksdk's proxies: a server's
metadata is its project's to write, so what it says is a claim, told apart from what the cloud
itself says of the server (the flavor it was booted with)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpu_tenancy.cloud.driver import LEASE_TAG, lease_resource_class
from gpu_tenancy.cloud.openstack.driver import VM_TAG, OpenStackCloud
from gpu_tenancy.cloud.openstack.lease_flavors import LEASE_SPEC

LEASE = "0b6f6a52-5f0e-4a1c-9d55-3f1e2d0c9a77"
OTHER = "5d1c3b2a-1e0f-4c9b-8a7d-6e5f4d3c2b1a"


class Compute:
    def __init__(self, servers):
        self.listed = servers

    def servers(self, details=True, all_projects=False):
        return self.listed

    def flavors(self, details=True, is_public=None):
        return []


def driver(*servers) -> OpenStackCloud:
    d = object.__new__(OpenStackCloud)   # no cloud to connect to: only what list_tagged uses
    service = SimpleNamespace(compute=Compute(list(servers)),
                              block_storage=SimpleNamespace(volumes=lambda details=True, all_projects=True: []))
    d.conns = SimpleNamespace(service=service)
    return d


def server(sid: str, metadata: dict, flavor: dict | None = None, project="p1") -> SimpleNamespace:
    return SimpleNamespace(id=sid, metadata=metadata, status="ACTIVE", compute_host="gpu-a100-1", name=sid,
                           project_id=project, flavor=flavor or {"original_name": "m1.small", "extra_specs": {}})


@pytest.mark.parametrize("tag", ["x", "", "-1", "1e3", "²", "9" * 200])
def test_a_vm_tag_that_is_no_number_is_no_vm_index_and_the_listing_goes_on(tag):
    """A tenant's `openstack server set --property gpu_tenancy_vm=x` on a server of its own made
    list_tagged raise ValueError, which is no CloudError: every reconcile stopped there (no
    leftovers of a finished lease were removed any more, and the tick that ran it went no further)."""
    listed = driver(server("junk", {LEASE_TAG: LEASE, VM_TAG: tag}),
                    server("ours", {LEASE_TAG: LEASE, VM_TAG: "3"})).list_tagged()
    assert {o.id: o.attrs["vm_index"] for o in listed} == {"junk": None, "ours": 3}


@pytest.mark.parametrize("flavor, expected", [
    ({"original_name": f"gt-lease-{LEASE}", "extra_specs": {LEASE_SPEC: LEASE}}, LEASE),   # as ensure_flavor makes it
    ({"original_name": "renamed", "extra_specs": {f"resources:{lease_resource_class(LEASE)}": "1"}}, LEASE),
    ({"original_name": f"gt-lease-{LEASE}"}, LEASE),   # Nova hides the specs from this caller
    ({"original_name": f"gt-lease-{OTHER}", "extra_specs": {LEASE_SPEC: OTHER}}, OTHER),
    ({"original_name": "m1.small", "extra_specs": {}}, None),
    ({"id": "some-flavor-id"}, None),                  # Nova before 2.47: no flavor of a lease said
])
def test_a_server_tagged_with_a_lease_shows_the_lease_of_the_flavor_it_was_booted_with(flavor, expected):
    listed = driver(server("s1", {LEASE_TAG: LEASE}, flavor)).list_tagged()
    assert [(o.lease_id, o.attrs["flavor_lease"]) for o in listed] == [(LEASE, expected)]

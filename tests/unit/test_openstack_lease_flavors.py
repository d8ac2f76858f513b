"""The openstack driver's lease flavor access (cloud/openstack/lease_flavors.py), against a
stand-in of openstacksdk's compute proxy: every failure a CloudError with its class, as the
simulated cloud raises it, so the engine retries it rather than fail the lease as a bug."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.cloud.openstack.lease_flavors import LeaseFlavors
from gpu_tenancy.domain.failures import FailureClass as F


class Compute:
    def __init__(self, flavor=None):
        self.flavor, self.added = flavor, []

    def find_flavor(self, name, ignore_missing=True, get_extra_specs=True, is_public=None):
        return self.flavor

    def get_flavor_access(self, flavor):
        return []

    def flavor_add_tenant_access(self, flavor, project_id):
        self.added.append(project_id)


def test_granting_a_flavor_that_is_gone_is_a_cloud_error():
    # Flavor gone between the lease's prepare and its activation (deleted by hand, or a reconcile
    # of another engine): the grant raised openstacksdk's ResourceNotFound itself, which the
    # engine's advance took for a bug of ours: the lease failed "internal", never retried; the
    # simulated cloud raises CloudError(api_error) here, retried on another host
    leases = LeaseFlavors(SimpleNamespace(compute=Compute(None)), {})
    with pytest.raises(CloudError) as raised:
        leases.grant("lease-1", "p1")
    assert raised.value.failure_class is F.API_ERROR
    assert "could not be found" in (raised.value.cloud_message or "")


def test_granting_an_existing_flavor_adds_the_project_once():
    compute = Compute(SimpleNamespace(id="f1"))
    LeaseFlavors(SimpleNamespace(compute=compute), {}).grant("lease-1", "p1")
    assert compute.added == ["p1"]


def test_a_soft_deleted_server_with_the_lease_flavor_is_still_the_leases():
    # a member's delete on a cloud with deferred delete (reclaim_instance_interval): the server
    # keeps its unit and GPUs and its project may restore it. Left out, the lease's end never
    # deleted it and waited for Nova's reclaim, ending (its GPUs held) until then
    def server(server_id, status, flavor_name):
        return SimpleNamespace(id=server_id, status=status, compute_host="gpu-a100-1", fault=None, task_state=None,
                               name=server_id, project_id="p1", flavor={"original_name": flavor_name})
    listed = [server("kept", "SOFT_DELETED", "gt-lease-lease-1"), server("gone", "DELETED", "gt-lease-lease-1"),
              server("other", "ACTIVE", "m1.small")]
    compute = SimpleNamespace(servers=lambda details, all_projects: listed)
    found = LeaseFlavors(SimpleNamespace(compute=compute), {}).servers("lease-1")
    assert [(s.id, s.status) for s in found] == [("kept", "SOFT_DELETED")]

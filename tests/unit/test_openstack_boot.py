"""The openstack driver's boot, against a stand-in of openstacksdk's compute proxy: which
server it takes as the same one, and the user's key copy it never leaves behind."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import LEASE_TAG, BootRequest, CloudError, ServerFlavor
from gpu_tenancy.cloud.openstack.driver import HOST_TAG, VM_TAG, OpenStackCloud
from gpu_tenancy.cloud.openstack.lease_flavors import LEASE_SPEC


class Compute:
    """What boot calls of a project's compute proxy, recorded."""

    def __init__(self, servers=(), create_fails: bool = False):
        self.listed, self.create_fails, self.keys, self.made = list(servers), create_fails, set(), []

    def servers(self, details=True):
        return self.listed

    def find_keypair(self, name, ignore_missing=True):
        return name if name in self.keys else None

    def create_keypair(self, name, public_key):
        self.keys.add(name)

    def delete_keypair(self, name, ignore_missing=True):
        self.keys.discard(name)

    def create_server(self, **attrs):
        if self.create_fails:
            raise sdk.HttpException(message="Quota exceeded for instances", http_status=403)
        self.made.append(attrs)
        return SimpleNamespace(id=f"server-{len(self.made)}")


def driver(compute: Compute) -> OpenStackCloud:
    d = object.__new__(OpenStackCloud)   # no cloud to connect to: only what boot uses
    service = SimpleNamespace(compute=SimpleNamespace(get_keypair=lambda name, user_id: SimpleNamespace(
        public_key="ssh-ed25519 AAAA user")))
    d.conns = SimpleNamespace(project=lambda project_id: SimpleNamespace(compute=compute), service=service)
    d._boot_networks = lambda request: {}
    return d


# the flavor Nova embeds in a server (>= 2.47): the lease's, as ensure_flavor made it
LEASE_FLAVOR = {"original_name": "gt-lease-lease-1", "extra_specs": {LEASE_SPEC: "lease-1"}}


def server(host: str | None, status="ACTIVE", flavor=LEASE_FLAVOR) -> SimpleNamespace:
    meta = {LEASE_TAG: "lease-1", VM_TAG: "0", **({HOST_TAG: host} if host else {})}
    return SimpleNamespace(id=f"old-on-{host}", metadata=meta, status=status, task_state=None, flavor=flavor)


REQUEST = BootRequest("p1", "lease-1", 0, "gpu-a100-2", "flavor", "image", key_name="laptop", user_id="u1")


def test_the_same_vm_asked_on_its_host_again_is_the_same_server():
    assert driver(Compute([server("gpu-a100-2")])).boot(REQUEST) == "old-on-gpu-a100-2"
    assert driver(Compute([server(None)])).boot(REQUEST) == "old-on-None"   # made before the host was tagged


@pytest.mark.parametrize("flavor", [
    {"original_name": "m1.small", "extra_specs": {}},                              # any flavor of the project's
    {"original_name": "gt-lease-lease-2", "extra_specs": {LEASE_SPEC: "lease-2"}},  # another lease's of its own
    {},                                                                            # Nova says nothing of it
])
def test_a_server_its_project_tagged_as_the_vm_is_not_taken_for_it_unless_booted_with_the_lease_flavor(flavor):
    """The project writes its servers' metadata: its own server, tagged with the lease, the VM and
    the host before the service's boot, was taken as the lease's VM (the lease counted a VM that
    holds none of its GPUs, or another lease's, and deleted that one at its end)."""
    compute = Compute([server("gpu-a100-2", flavor=flavor)])
    assert driver(compute).boot(REQUEST) == "server-1"
    assert len(compute.made) == 1


def test_a_server_nova_shows_only_the_flavor_id_of_is_the_vm_if_that_is_the_requests():
    assert driver(Compute([server("gpu-a100-2", flavor={"id": "flavor"})])).boot(REQUEST) == "old-on-gpu-a100-2"
    assert driver(Compute([server("gpu-a100-2", flavor={"id": "m1.small"})])).boot(REQUEST) == "server-1"


def test_the_same_vm_asked_on_another_host_is_a_new_server_tagged_with_its_host():
    compute = Compute([server("gpu-a100-1")])
    assert driver(compute).boot(REQUEST) == "server-1"
    assert compute.made[0]["metadata"] == {LEASE_TAG: "lease-1", VM_TAG: "0", HOST_TAG: "gpu-a100-2"}


@pytest.mark.parametrize("create_fails", [False, True])
def test_the_key_copy_is_gone_after_the_create_made_or_refused(create_fails):
    compute = Compute(create_fails=create_fails)
    if create_fails:
        with pytest.raises(CloudError):
            driver(compute).boot(REQUEST)
    else:
        driver(compute).boot(REQUEST)
        assert compute.made[0]["key_name"] == "gt-lease-1-0"
    assert compute.keys == set()


class ShelveCompute:
    """What shelve calls of the service's compute proxy, recorded."""

    def __init__(self, status: str, task_state=None):
        self.server = SimpleNamespace(id="s1", status=status, task_state=task_state)
        self.calls: list[str] = []

    def get_server(self, server_id):
        return self.server

    def shelve_server(self, server_id):
        self.calls.append("shelve")

    def shelve_offload_server(self, server_id):
        self.calls.append("offload")


@pytest.mark.parametrize("status, expected", [
    ("ACTIVE", ["shelve"]),
    # stopped by its tenant (openstack server stop, or a shutdown in the guest): Nova's shelve takes
    # vm_state active, stopped, paused and suspended alike; left alone, the park waited
    # boot_timeout_seconds and then failed the lease, deleting its VMs and their disks
    ("SHUTOFF", ["shelve"]),
    ("PAUSED", ["shelve"]),
    ("SHELVED", ["offload"]),
    ("SHELVED_OFFLOADED", []),
])
def test_shelve_shelves_a_server_in_every_status_nova_shelves(status, expected):
    compute = ShelveCompute(status)
    d = object.__new__(OpenStackCloud)
    d.conns = SimpleNamespace(service=SimpleNamespace(compute=compute))
    d.shelve("s1")
    assert compute.calls == expected


class DeleteCompute:
    """What delete_server calls of the service's compute proxy: a Nova with deferred delete
    (reclaim_instance_interval) soft-deletes on a plain delete."""

    def __init__(self, deferred: bool, status: str):
        self.deferred, self.status, self.calls = deferred, status, []

    def delete_server(self, server_id, ignore_missing=True, force=False):
        self.calls.append("force" if force else "delete")
        if self.status == "DELETED":
            if ignore_missing and not force:
                return
            raise sdk.NotFoundException(message=f"Instance {server_id} could not be found.", http_status=404)
        self.status = "SOFT_DELETED" if self.deferred and not force else "DELETED"

    def get_server(self, server_id):
        if self.status == "DELETED":
            raise sdk.NotFoundException(message=f"Instance {server_id} could not be found.", http_status=404)
        return SimpleNamespace(id=server_id, status=self.status, task_state=None)


@pytest.mark.parametrize("deferred, status, calls", [
    (False, "ACTIVE", ["delete"]),
    (True, "ACTIVE", ["delete", "force"]),
    (True, "SOFT_DELETED", ["force"]),      # soft-deleted by its project (or by a delete of ours before)
])
def test_a_server_the_cloud_only_soft_deleted_is_deleted_for_good(deferred, status, calls):
    # soft-deleted, it kept its GPUs until Nova reclaimed it (the lease stayed ending, its GPUs held
    # from the next lease) and its project could restore it and go on using them past the lease's end
    compute = DeleteCompute(deferred, status)
    d = object.__new__(OpenStackCloud)
    d.conns = SimpleNamespace(service=SimpleNamespace(compute=compute))
    d.delete_server("s1")
    assert (compute.calls, compute.status) == (calls, "DELETED")
    d.delete_server("s1")   # gone: nothing to do
    assert compute.status == "DELETED"


class ResizeCompute(ShelveCompute):
    """What confirm_resize calls of the service's compute proxy."""

    def confirm_server_resize(self, server_id):
        self.calls.append("confirm")


@pytest.mark.parametrize("status, expected", [
    # resized by its project off a lease's flavor and left unconfirmed: Nova holds the old flavor's
    # allocation (the lease's GPUs and unit) against the migration until it is confirmed
    ("VERIFY_RESIZE", ["confirm"]),
    ("RESIZE", []),          # still migrating: looked at again at the next pass
    ("ACTIVE", []),          # confirmed or reverted meanwhile
])
def test_confirm_resize_confirms_only_a_resize_awaiting_it(status, expected):
    compute = ResizeCompute(status)
    d = object.__new__(OpenStackCloud)
    d.conns = SimpleNamespace(service=SimpleNamespace(compute=compute))
    d.confirm_resize("s1")
    assert compute.calls == expected


@pytest.mark.parametrize("embedded, expected", [
    # Nova >= 2.47: the flavor embedded without its id (openstacksdk answers its name for the id)
    ({"original_name": "gt-lease-l1", "extra_specs": {LEASE_SPEC: "l1", "resources:CUSTOM_GT_LEASE_L1": "1"}},
     ServerFlavor(None, "gt-lease-l1", "l1", True)),
    ({"original_name": "m1.small", "vcpus": 1, "ram": 512, "disk": 1}, ServerFlavor(None, "m1.small", None, False)),
    ({"original_name": "plain", "extra_specs": {"trait:CUSTOM_GPU_TENANCY": "required"}},
     ServerFlavor(None, "plain", None, False)),
    ({"original_name": "op.a100", "extra_specs": {"pci_passthrough:alias": "a100:1"}},
     ServerFlavor(None, "op.a100", None, True)),
    ({"original_name": "op.vgpu", "extra_specs": {"resources1:VGPU": "1"}}, ServerFlavor(None, "op.vgpu", None, True)),
    ({"original_name": "op.pgpu", "extra_specs": {"resources:CUSTOM_PGPU_A100": "2"}},
     ServerFlavor(None, "op.pgpu", None, True)),
    ({"original_name": "none", "extra_specs": {"resources:CUSTOM_PGPU_A100": "0"}}, ServerFlavor(None, "none", None, False)),
    ({"id": "f-1", "links": []}, ServerFlavor("f-1")),          # before 2.47: only its id, nothing known of it
])
def test_the_flavor_a_server_is_on_is_read_from_what_nova_embeds(embedded, expected):
    from openstack.compute.v2.server import Server

    from gpu_tenancy.cloud.openstack.lease_flavors import server_flavor
    assert server_flavor(Server(id="s1", flavor=embedded), lambda rc: rc == "CUSTOM_PGPU_A100") == expected
    assert server_flavor(SimpleNamespace(flavor=embedded), lambda rc: rc == "CUSTOM_PGPU_A100") == expected

"""The per-lease flavor contract (cloud/driver.py: ensure_lease_class ... leases_in_cloud):
a lease is the only way to its GPUs. Each case boots as a tenant's member would (the
rig's tenant_boot: no host given) and asserts what the cloud itself lets through.

Written against the `rig` of test_cloud_driver_contract.py (the simulated cloud);
tests/integration/test_cloud_driver_contract_openstack.py runs them on the loopback cloud."""
from __future__ import annotations

import uuid

from gpu_tenancy.cloud.driver import ShapeSpec, lease_flavor_name, lease_resource_class
from tests.contract.test_cloud_driver_contract import rig  # noqa: F401  (the fixture)

A100_X1 = ShapeSpec("contract.a100x1", "A100", 1, 1, 512, 1, "a100")


class Lease:
    """A lease's class, inventory and flavor, made in the engine's order; removed at the end
    in the reverse order, whatever the test left."""

    def __init__(self, on, vms_per_host: dict[str, int], project: str | None = None):
        self.rig, self.cloud = on, on.cloud
        self.id, self.project = str(uuid.uuid4()), project or on.project
        self.resource_class = self.cloud.ensure_lease_class(self.id)
        on.cleanups.append(self.remove)
        self.cloud.set_lease_inventory(self.id, vms_per_host)
        self.flavor = self.cloud.ensure_lease_flavor(self.id, self.project, A100_X1)

    def grant(self):
        self.cloud.grant_lease_flavor(self.id, self.project)

    def boot(self, project: str | None = None) -> str | None:
        return self.rig.tenant_boot(project or self.project, self.flavor.id)

    def host_of(self, server: str) -> str | None:
        return self.cloud.server_state(server).host

    def remove(self):
        for server in self.cloud.lease_servers(self.id):
            self.rig.delete(server.id)
        self.cloud.revoke_lease_flavor(self.id, self.project)
        self.rig.wait("the lease's inventory to be removable", lambda: self.cloud.remove_lease_inventory(self.id))
        self.cloud.remove_lease_flavor(self.id)
        self.cloud.remove_lease_class(self.id)


def test_the_flavor_is_the_leases_own_and_made_once(rig):  # noqa: F811
    lease = Lease(rig, {"gpu-a100-2": 1})
    assert lease.resource_class == lease_resource_class(lease.id) == lease.flavor.resource_class
    assert lease.flavor.name == lease_flavor_name(lease.id)
    assert rig.cloud.ensure_lease_class(lease.id) == lease.resource_class
    assert rig.cloud.ensure_lease_flavor(lease.id, rig.project, A100_X1) == lease.flavor
    rig.cloud.set_lease_inventory(lease.id, {"gpu-a100-2": 1})      # again: no change
    assert lease.id in rig.cloud.leases_in_cloud()
    assert rig.cloud.lease_servers(lease.id) == []


def test_only_a_granted_project_boots_and_only_onto_a_planned_host_and_no_more_than_planned(rig):  # noqa: F811
    lease = Lease(rig, {"gpu-a100-2": 1})
    assert lease.boot() is None                                      # no access yet
    lease.grant()
    lease.grant()                                                    # idempotent
    assert lease.boot(rig.other) is None                             # another project: never
    server = lease.boot()
    assert server is not None
    assert lease.host_of(server) == "gpu-a100-2"    # gpu-a100-1 has free GPUs but no unit of the lease
    assert lease.boot() is None                                      # one more than planned
    listed = {s.id: s for s in rig.cloud.lease_servers(lease.id) if s.status != "ERROR"}  # refused ones: ERROR
    assert set(listed) == {server}
    assert (listed[server].status, listed[server].host, listed[server].project_id) == (
        "ACTIVE", "gpu-a100-2", rig.project)


def test_after_revoke_and_removal_the_flavor_boots_nothing(rig):  # noqa: F811
    lease = Lease(rig, {"gpu-a100-1": 1, "gpu-a100-2": 1})
    lease.grant()
    server = lease.boot()
    assert server is not None and lease.host_of(server) in ("gpu-a100-1", "gpu-a100-2")
    rig.cloud.revoke_lease_flavor(lease.id, rig.project)
    rig.cloud.revoke_lease_flavor(lease.id, rig.project)             # idempotent
    assert lease.boot() is None                                      # a free unit left, but no access
    lease.grant()
    assert rig.cloud.remove_lease_inventory(lease.id) is False       # the server holds its unit
    assert lease.boot() is None                                      # the free unit went at once
    rig.delete(server)
    assert rig.cloud.remove_lease_inventory(lease.id) is True
    assert lease.boot() is None                                      # access, but no inventory


def test_moving_the_inventory_leaves_no_free_unit_where_it_was(rig):  # noqa: F811
    lease = Lease(rig, {"gpu-a100-1": 2})
    lease.grant()
    first = lease.boot()
    assert first is not None and lease.host_of(first) == "gpu-a100-1"
    rig.cloud.set_lease_inventory(lease.id, {"gpu-a100-2": 1})     # moved while a server holds a unit
    second = lease.boot()
    assert second is not None and lease.host_of(second) == "gpu-a100-2"
    assert lease.boot() is None     # gpu-a100-1 kept only what its server holds, gpu-a100-2 is full
    rig.delete(first)
    rig.cloud.set_lease_inventory(lease.id, {"gpu-a100-2": 1})     # a later call removes the old one
    assert lease.boot() is None                                      # nothing came back on gpu-a100-1
    assert {s.id for s in rig.cloud.lease_servers(lease.id) if s.status == "ACTIVE"} == {second}


def test_removal_in_reverse_order_is_idempotent_and_leaves_nothing(rig):  # noqa: F811
    lease = Lease(rig, {"gpu-a100-1": 1})
    lease.grant()
    server = lease.boot()
    assert server is not None
    assert rig.cloud.remove_lease_inventory(lease.id) is False
    rig.delete(server)
    assert server not in {s.id for s in rig.cloud.lease_servers(lease.id)}
    for _ in range(2):
        rig.cloud.revoke_lease_flavor(lease.id, rig.project)
        assert rig.cloud.remove_lease_inventory(lease.id) is True
        rig.cloud.remove_lease_flavor(lease.id)
        rig.cloud.revoke_lease_flavor(lease.id, rig.project)        # the flavor gone: a no-op
        rig.cloud.remove_lease_class(lease.id)
    assert lease.id not in rig.cloud.leases_in_cloud()
    assert lease.boot() is None


def test_leases_in_cloud_sees_each_kind_of_leftover(rig):  # noqa: F811
    cloud = rig.cloud
    class_only, with_inventory, flavor_only = (Lease(rig, {"gpu-a100-1": 1}) for _ in range(3))
    assert cloud.remove_lease_inventory(class_only.id)
    cloud.remove_lease_flavor(class_only.id)                         # a crash after the class was made
    cloud.remove_lease_flavor(with_inventory.id)                     # ... after the inventory was set
    assert cloud.remove_lease_inventory(flavor_only.id)              # ... before the flavor was removed
    cloud.remove_lease_class(flavor_only.id)
    ours = {class_only.id, with_inventory.id, flavor_only.id}
    assert ours <= cloud.leases_in_cloud()
    for lease in (class_only, with_inventory, flavor_only):
        lease.remove()
    assert not ours & cloud.leases_in_cloud()


def test_each_planned_host_takes_its_own_vms(rig):  # noqa: F811
    hosts = {"gpu-a100-1": 1, "gpu-a100-2": 1}
    lease = Lease(rig, hosts)
    lease.grant()
    servers = [lease.boot() for _ in range(2)]
    assert None not in servers
    assert sorted(lease.host_of(s) for s in servers) == sorted(hosts)
    assert lease.boot() is None

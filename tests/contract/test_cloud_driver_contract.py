"""The cloud driver contract (cloud/driver.py: CloudDriver): what every driver must do,
written once. Each case takes a `rig`: a driver, two tenant projects, an active image,
the GPU hosts the cloud should show, and a way to wait for the cloud.

Here the rig is the simulated cloud; tests/integration/test_cloud_driver_contract_openstack.py
runs these same cases on the openstack driver against the loopback cloud (the CI's
integration step). What only one driver has (the simulated cloud's test hooks, Nova's
quotas and roles) stays in that driver's own tests."""
from __future__ import annotations

import uuid

import pytest

from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud import registry
from gpu_tenancy.cloud.driver import (
    LEASE_TAG, BootRequest, CloudError, ShapeSpec, VolumeRequest, lease_flavor_name, lease_resource_class)
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.domain.failures import classify_fault

# the drivers with a rig: this module's, and the openstack one in tests/integration/
RIGGED = {"simulated", "openstack"}
# the loopback cloud's hosts (scripts/loopback/), which the simulated rig copies
HOSTS = {"gpu-a100-1": ("A100", 4), "gpu-a100-2": ("A100", 4), "gpu-h100-1": ("H100", 2)}


class Rig:
    """What a contract case needs beside the driver; a driver's rig fills it in."""
    name = "abstract"
    cloud = None
    project = other = image = ""
    # the networks of `project` and `other`, and the external one (the loopback cloud's names)
    network, other_network, external = "tenant-a-net", "tenant-b-net", "public"

    def __init__(self):
        self.cleanups: list = []
        self.units: dict[str, dict[str, set]] = {}   # lease -> host -> VMs booted there by boot()

    def wait(self, what: str, check, timeout: float = 120):
        """check() once it is true, the cloud's time going on meanwhile."""
        raise NotImplementedError

    def set_enabled(self, host: str, enabled: bool) -> None:
        raise NotImplementedError

    def inactive_image(self) -> str:
        """An image the cloud has but that is not active."""
        raise NotImplementedError

    def tenant_volume(self, project: str, size_gb: int) -> str:
        """A volume the tenant made itself, not the service."""
        raise NotImplementedError

    def delete_volume(self, volume_id: str) -> None:
        """Remove a volume after the test (drivers never delete volumes)."""

    def stop(self, server: str) -> None:
        """The tenant stops its VM (`openstack server stop`): it is SHUTOFF once this returns."""
        raise NotImplementedError

    def tenant_boot(self, project: str, flavor_id: str) -> str | None:
        """Boot as the project's member would, no host given: the server id once ACTIVE, None
        when the cloud refused it (an API error, or the server went to ERROR). The rig deletes
        what it made."""
        raise NotImplementedError

    def tag(self, project: str, server: str, metadata: dict[str, str]) -> None:
        """The project's member sets metadata on a server of theirs (`openstack server set
        --property`), any key they like."""
        raise NotImplementedError

    def shape(self, gpu_model="A100", gpus=1, vcpus=1) -> ShapeSpec:
        """A shape of this test alone."""
        return ShapeSpec(f"contract.{uuid.uuid4().hex[:6]}", gpu_model, gpus, vcpus, 512, 1, gpu_model.lower())

    def lease_flavor(self, lease: str, shape: ShapeSpec, inventory: dict[str, int]) -> str:
        """The lease's class, `inventory` and flavor, as the engine makes them (all removed after
        the test); the flavor's id."""
        if lease not in self.units:
            self.units[lease] = {}
            self.cleanups.append(lambda: self.remove_lease(lease))
        self.cloud.ensure_lease_class(lease)
        self.cloud.set_lease_inventory(lease, inventory)
        return self.cloud.ensure_lease_flavor(lease, self.project, shape).id

    def remove_lease(self, lease: str) -> None:
        self.wait("the lease's units to be free", lambda: self.cloud.remove_lease_inventory(lease))
        self.cloud.remove_lease_flavor(lease)
        self.cloud.remove_lease_class(lease)

    def boot(self, host: str, shape: ShapeSpec, lease: str | None = None, vm: int = 0, **extra) -> str:
        """The service's boot with the lease flavor path: a unit of the lease's class on the
        host for each VM booted there."""
        lease = lease or str(uuid.uuid4())
        vms = self.units.get(lease, {}).get(host, set()) | {vm}
        flavor = self.lease_flavor(lease, shape, {**{h: len(v) for h, v in self.units.get(lease, {}).items()},
                                                  host: len(vms)})
        self.units[lease][host] = vms
        server = self.cloud.boot(BootRequest(self.project, lease, vm, host, flavor, self.image,
                                             name=f"contract-{vm}", **extra))
        self.cleanups.append(lambda: self.delete(server))
        return server

    def delete(self, server: str) -> None:
        """Delete the server and wait until it is gone and its GPUs are free."""
        self.cloud.delete_server(server)
        self.wait("the server to go", lambda: self.cloud.server_state(server).status == "DELETED")
        self.wait("its GPUs to be released", lambda: self.cloud.gpus_released(server))

    def close(self) -> None:
        for cleanup in reversed(self.cleanups):
            cleanup()


class SimulatedRig(Rig):
    name = "simulated"
    project, other = "a1b2c3d4e5f60718293a4b5c6d7e8f90", "ffffeeeeddddccccbbbbaaaa99998888"
    image = "11111111-2222-3333-4444-555555555555"

    def __init__(self):
        super().__init__()
        self.clock = VirtualClock(1_700_000_000)
        self.cloud = SimulatedCloud({
            "boot_seconds": 30, "delete_seconds": 5,
            "gpu_models": {"A100": {"resource_class": "CUSTOM_PGPU_A100", "pci_alias": "a100"},
                           "H100": {"resource_class": "CUSTOM_PGPU_H100", "pci_alias": "h100"}},
            "hosts": [{"name": name, "gpu_model": model, "gpus": gpus} for name, (model, gpus) in HOSTS.items()],
            "images": [{"id": self.image, "name": "ubuntu-22.04"},
                       {"id": "queued-image", "name": "half-uploaded", "status": "queued"}],
            # the loopback cloud's networks (scripts/loopback/README.md, "Networks")
            "networks": [{"name": "public", "external": True, "cidr": "172.24.4.0/24"},
                         {"name": "tenant-a-net", "project": self.project, "cidr": "10.1.0.0/24"},
                         {"name": "tenant-b-net", "project": self.other, "cidr": "10.2.0.0/24"}],
        }, self.clock)

    def wait(self, what, check, timeout=120):
        for _ in range(int(timeout)):
            if value := check():
                return value
            self.clock.advance(1)
        pytest.fail(f"timed out after {timeout} s of the cloud's time waiting for {what}")

    def set_enabled(self, host, enabled):
        self.cloud.set_host_state(host, enabled=enabled)

    def inactive_image(self):
        return "half-uploaded"

    def stop(self, server):
        self.cloud.power_off(server)

    def tenant_volume(self, project, size_gb):
        return self.cloud.add_volume(project, size_gb)

    def tag(self, project, server, metadata):
        assert self.cloud.servers()[server]["project_id"] == project
        self.cloud.set_server_metadata(server, metadata)

    def tenant_boot(self, project, flavor_id):
        try:
            server = self.cloud.tenant_boot(project, flavor_id)
        except CloudError:
            return None
        self.cleanups.append(lambda: self.delete(server))
        state = self.wait("the tenant's server to build", lambda: (s := self.cloud.server_state(server)).status
                          != "BUILD" and s)
        if state.status == "ACTIVE":
            return server
        self.delete(server)   # refused: nothing left of it
        return None


@pytest.fixture
def rig():
    made = SimulatedRig()
    yield made
    made.close()


def test_every_registered_driver_runs_the_contract():
    missing = set(registry.names()) - RIGGED
    assert not missing, f"cloud drivers without a rig for this contract: {', '.join(sorted(missing))}"


def test_capacity_shows_each_gpu_host_with_its_model_count_and_state(rig):
    hosts = {h.name: h for h in rig.cloud.capacity()}
    assert {name: (h.gpu_model, h.gpus) for name, h in hosts.items()} == HOSTS
    assert all(h.up and h.enabled for h in hosts.values())
    rig.set_enabled("gpu-h100-1", False)
    try:
        assert {h.name: h.enabled for h in rig.cloud.capacity()} == {
            "gpu-a100-1": True, "gpu-a100-2": True, "gpu-h100-1": False}
    finally:
        rig.set_enabled("gpu-h100-1", True)
    assert all(h.enabled for h in rig.cloud.capacity())


def test_a_lease_gets_its_own_class_inventory_and_private_flavor_and_gives_them_back(rig):
    cloud, lease, shape = rig.cloud, str(uuid.uuid4()), rig.shape()
    rig.cleanups.append(lambda: rig.remove_lease(lease))
    assert cloud.ensure_lease_class(lease) == lease_resource_class(lease) == cloud.ensure_lease_class(lease)
    cloud.set_lease_inventory(lease, {"gpu-a100-1": 1})
    cloud.set_lease_inventory(lease, {"gpu-a100-1": 1})                       # idempotent
    flavor = cloud.ensure_lease_flavor(lease, rig.project, shape)
    assert (flavor.name, flavor.resource_class) == (lease_flavor_name(lease), lease_resource_class(lease))
    assert cloud.ensure_lease_flavor(lease, rig.project, shape) == flavor      # made once
    assert lease in cloud.leases_in_cloud()
    assert rig.tenant_boot(rig.project, flavor.id) is None                      # no access yet
    cloud.grant_lease_flavor(lease, rig.project)
    cloud.grant_lease_flavor(lease, rig.project)                                # idempotent
    assert rig.tenant_boot(rig.other, flavor.id) is None                        # another project: none
    server = rig.tenant_boot(rig.project, flavor.id)
    assert server is not None and cloud.server_state(server).host == "gpu-a100-1"   # where its unit is
    assert [s.id for s in cloud.lease_servers(lease)] == [server]
    assert rig.tenant_boot(rig.project, flavor.id) is None                      # beyond its one VM
    cloud.revoke_lease_flavor(lease, rig.project)
    cloud.revoke_lease_flavor(lease, rig.project)                               # idempotent
    assert not cloud.remove_lease_inventory(lease)                              # a server holds its unit
    rig.delete(server)
    assert cloud.lease_servers(lease) == []
    assert cloud.remove_lease_inventory(lease) and cloud.remove_lease_inventory(lease)
    cloud.remove_lease_flavor(lease)
    cloud.remove_lease_class(lease)
    assert lease not in cloud.leases_in_cloud()
    cloud.revoke_lease_flavor(lease, rig.project)                               # no-op once gone
    cloud.remove_lease_flavor(lease)
    cloud.remove_lease_class(lease)


def test_a_lease_flavor_boots_only_where_the_lease_has_a_unit_free(rig):
    cloud, lease, shape = rig.cloud, str(uuid.uuid4()), rig.shape()
    flavor = rig.lease_flavor(lease, shape, {"gpu-a100-1": 1})
    first = cloud.boot(BootRequest(rig.project, lease, 0, "gpu-a100-1", flavor, rig.image, name="contract-0"))
    rig.cleanups.append(lambda: rig.delete(first))
    elsewhere = cloud.boot(BootRequest(rig.project, lease, 1, "gpu-a100-2", flavor, rig.image, name="contract-1"))
    rig.cleanups.append(lambda: rig.delete(elsewhere))
    state = rig.wait("the boot on another host to fail", lambda: (s := cloud.server_state(elsewhere)).status
                     != "BUILD" and s)
    assert state.status == "ERROR" and classify_fault(state.fault) == F.NO_VALID_HOST
    assert rig.wait("the first to be ACTIVE", lambda: cloud.server_state(first).status == "ACTIVE")


def test_a_missing_or_inactive_image_is_an_image_failure(rig):
    rig.cloud.check_image(rig.image)
    for ref in (str(uuid.uuid4()), "", rig.inactive_image()):
        with pytest.raises(CloudError) as err:
            rig.cloud.check_image(ref)
        assert err.value.failure_class == F.IMAGE and err.value.cloud_message


def test_a_new_volume_is_made_once_per_lease_and_is_its_projects_alone(rig):
    cloud, lease = rig.cloud, str(uuid.uuid4())
    made = cloud.ensure_volume(rig.project, lease, VolumeRequest(size_gb=1))
    rig.cleanups.append(lambda: rig.delete_volume(made))
    assert cloud.ensure_volume(rig.project, lease, VolumeRequest(size_gb=1)) == made
    assert cloud.volume_status(made) == "available"
    listed = {v.id: v for v in cloud.project_volumes(rig.project)}
    assert (listed[made].status, listed[made].size_gb, listed[made].lease_id, listed[made].attached_to) == (
        "available", 1, lease, ())
    assert made not in {v.id for v in cloud.project_volumes(rig.other)}
    tagged = [(o.lease_id, o.project_id) for o in cloud.list_tagged() if o.kind == "volume" and o.id == made]
    assert tagged == [(lease, rig.project)]
    cloud.check_volume_owner(rig.project, made)
    for project, volume in ((rig.other, made), (rig.project, str(uuid.uuid4()))):   # another's looks missing
        with pytest.raises(CloudError) as owner:
            cloud.check_volume_owner(project, volume)
        assert owner.value.failure_class == F.VOLUME
        with pytest.raises(CloudError) as taken:
            cloud.ensure_volume(project, str(uuid.uuid4()), VolumeRequest(volume_id=volume))
        assert taken.value.failure_class == F.VOLUME
    assert cloud.volume_status(str(uuid.uuid4())) == "missing"
    with pytest.raises(CloudError) as sizeless:
        cloud.ensure_volume(rig.project, str(uuid.uuid4()), VolumeRequest(size_gb=0))
    assert sizeless.value.failure_class == F.VOLUME


def test_a_tenants_own_volume_is_used_as_it_is_and_is_not_ours(rig):
    own = rig.tenant_volume(rig.project, 1)
    assert rig.cloud.ensure_volume(rig.project, str(uuid.uuid4()), VolumeRequest(volume_id=own)) == own
    rig.cloud.check_volume_owner(rig.project, own)
    listed = {v.id: v for v in rig.cloud.project_volumes(rig.project)}
    assert listed[own].lease_id is None
    assert own not in {o.id for o in rig.cloud.list_tagged()}


def test_a_server_boots_once_per_lease_and_vm_runs_with_its_volume_and_gives_all_back(rig):
    cloud, lease = rig.cloud, str(uuid.uuid4())
    volume = cloud.ensure_volume(rig.project, lease, VolumeRequest(size_gb=1))
    rig.cleanups.append(lambda: rig.delete_volume(volume))
    shape = rig.shape()
    server = rig.boot("gpu-a100-1", shape, lease)
    assert rig.boot("gpu-a100-1", shape, lease) == server                # asked again: the same server
    elsewhere = rig.boot("gpu-a100-2", shape, lease)   # the same VM asked on another host (an attempt elsewhere)
    assert elsewhere != server                           # is another server, not this one taken over
    rig.delete(elsewhere)
    state = rig.wait("the server to be ACTIVE", lambda: (s := cloud.server_state(server)).status != "BUILD" and s)
    assert (state.status, state.host, state.fault) == ("ACTIVE", "gpu-a100-1", None)
    tagged = [o for o in cloud.list_tagged() if o.kind == "server" and o.id == server]
    assert [(o.lease_id, o.project_id, o.attrs["vm_index"], o.attrs["flavor_lease"]) for o in tagged] == [
        (lease, rig.project, 0, lease)]
    assert not cloud.gpus_released(server)

    cloud.attach_volume(server, volume)
    cloud.attach_volume(server, volume)                                   # no-op when attached
    assert cloud.volume_status(volume) == "in-use"
    assert {v.id: v.attached_to for v in cloud.project_volumes(rig.project)}[volume] == (server,)
    assert cloud.ensure_volume(rig.project, lease, VolumeRequest(volume_id=volume)) == volume  # its own lease again
    with pytest.raises(CloudError) as in_use:
        cloud.ensure_volume(rig.project, str(uuid.uuid4()), VolumeRequest(volume_id=volume))
    assert in_use.value.failure_class == F.VOLUME

    rig.delete(server)                                                    # gone, then its GPUs free
    cloud.delete_server(server)                                           # no-op when gone
    assert server not in {o.id for o in cloud.list_tagged()}
    rig.wait("the volume to be detached", lambda: cloud.volume_status(volume) == "available")  # kept
    assert cloud.server_state(str(uuid.uuid4())).status == "DELETED"


def test_a_lease_tag_the_tenant_writes_is_a_claim_and_the_flavor_tells_the_servers_lease(rig):
    """What reconcile trusts (engine/lifecycle.py): a server's tag is its project's to write,
    on a server the service booted as on its own; the flavor it was booted with is the cloud's."""
    cloud, lease, shape = rig.cloud, str(uuid.uuid4()), rig.shape()
    ours = rig.boot("gpu-a100-1", shape, lease)
    flavor = rig.lease_flavor(lease, shape, {"gpu-a100-1": 1, "gpu-a100-2": 1})
    cloud.grant_lease_flavor(lease, rig.project)
    own = rig.tenant_boot(rig.project, flavor)
    assert own is not None
    finished, unknown = str(uuid.uuid4()), str(uuid.uuid4())
    rig.tag(rig.project, own, {LEASE_TAG: finished})
    rig.tag(rig.project, ours, {LEASE_TAG: unknown})
    tagged = {o.id: (o.lease_id, o.attrs["flavor_lease"], o.project_id)
              for o in cloud.list_tagged() if o.kind == "server" and o.id in (own, ours)}
    assert tagged == {own: (finished, lease, rig.project), ours: (unknown, lease, rig.project)}
    assert {s.id for s in cloud.lease_servers(lease)} == {own, ours}      # the lease's, by its flavor
    assert cloud.lease_servers(finished) == [] and cloud.lease_servers(unknown) == []


def test_a_shelved_server_gives_its_gpus_back_and_comes_back_on_the_named_host_with_its_volume(rig):
    """What parking a lease asks (engine/park.py, engine/resume.py): shelve and offload, then unshelve pinned to a host."""
    cloud, lease = rig.cloud, str(uuid.uuid4())
    volume = cloud.ensure_volume(rig.project, lease, VolumeRequest(size_gb=1))
    rig.cleanups.append(lambda: rig.delete_volume(volume))
    server = rig.boot("gpu-a100-1", rig.shape(gpus=2), lease)
    rig.wait("the server to be ACTIVE", lambda: cloud.server_state(server).status == "ACTIVE")
    cloud.attach_volume(server, volume)
    rig.wait("the volume to be in use", lambda: cloud.volume_status(volume) == "in-use")

    def shelved() -> bool:
        cloud.shelve(server)   # again while SHELVED: offloads it (a cloud that does not at once)
        return cloud.server_state(server).status == "SHELVED_OFFLOADED" and cloud.gpus_released(server)
    rig.wait("the server to be shelved and offloaded, its GPUs free", shelved, timeout=300)
    cloud.shelve(server)                                                  # no-op when offloaded
    cloud.set_lease_inventory(lease, {})                                  # parked: no unit anywhere
    cloud.set_lease_inventory(lease, {"gpu-a100-1": 1})                   # its slot's host
    cloud.unshelve(server, "gpu-a100-1")
    state = rig.wait("the server to be ACTIVE again", lambda: (s := cloud.server_state(server)).status == "ACTIVE"
                     and s, timeout=300)
    assert state.host == "gpu-a100-1" and not cloud.gpus_released(server)
    cloud.unshelve(server, "gpu-a100-1")                                  # no-op unless offloaded
    rig.wait("its volume attached again", lambda: cloud.volume_status(volume) == "in-use")
    assert {v.id: v.attached_to for v in cloud.project_volumes(rig.project)}[volume] == (server,)
    cloud.attach_volume(server, volume)                                   # no-op: it is attached


def test_a_server_its_tenant_stopped_is_shelved_too_and_its_gpus_given_back(rig):
    """A tenant may stop its VM; parking its lease must still free the GPUs (Nova shelves a
    stopped server as it does a running one)."""
    cloud = rig.cloud
    lease = str(uuid.uuid4())
    server = rig.boot("gpu-a100-1", rig.shape(gpus=1), lease)
    rig.wait("the server to be ACTIVE", lambda: cloud.server_state(server).status == "ACTIVE")
    rig.stop(server)
    assert cloud.server_state(server).status == "SHUTOFF" and not cloud.gpus_released(server)

    def shelved() -> bool:
        cloud.shelve(server)
        return cloud.server_state(server).status == "SHELVED_OFFLOADED" and cloud.gpus_released(server)
    rig.wait("the stopped server to be shelved and offloaded, its GPUs free", shelved, timeout=300)
    cloud.unshelve(server, "gpu-a100-1")                                  # a resume: it runs again
    state = rig.wait("the server to be back", lambda: (s := cloud.server_state(server)).status
                     not in ("SHELVED_OFFLOADED", "SHELVED", "BUILD") and s.status, timeout=300)
    assert state == "ACTIVE"


def test_a_boot_pinned_to_a_host_without_those_gpus_fails_with_no_valid_host(rig):
    server = rig.boot("gpu-h100-1", rig.shape("A100", 4))
    state = rig.wait("the boot to fail", lambda: (s := rig.cloud.server_state(server)).status == "ERROR" and s)
    assert classify_fault(state.fault) == F.NO_VALID_HOST
    rig.wait("its claim to be given back", lambda: rig.cloud.gpus_released(server))
    rig.delete(server)


# --- networks ---------------------------------------------------------------------------------
def test_a_project_sees_its_own_network_and_the_external_one_and_not_anothers_private_one(rig):
    seen = {n.name: n for n in rig.cloud.project_networks(rig.project)}
    assert seen[rig.network].project_id == rig.project and not seen[rig.network].external
    assert seen[rig.external].external
    assert rig.other_network not in seen
    assert rig.network not in {n.name for n in rig.cloud.project_networks(rig.other)}


def test_the_projects_security_group_is_made_once(rig):
    first = rig.cloud.ensure_security_group(rig.project)
    assert rig.cloud.ensure_security_group(rig.project) == first


def test_a_vm_on_the_projects_network_shows_its_fixed_ip_and_a_floating_ip_until_it_is_released(rig):
    network = next(n.id for n in rig.cloud.project_networks(rig.project) if n.name == rig.network)
    group = rig.cloud.ensure_security_group(rig.project)
    lease = str(uuid.uuid4())
    server = rig.boot("gpu-a100-1", rig.shape(), lease, network_id=network, security_group=group)
    rig.cleanups.append(lambda: rig.cloud.release_floating_ips(lease))
    state = rig.wait("the server ACTIVE with an address", lambda: (
        (found := rig.cloud.server_state(server)).status == "ACTIVE" and found.addresses and found))
    [fixed] = state.addresses
    assert (fixed.network, fixed.kind) == (rig.network, "fixed")
    floating = rig.cloud.ensure_floating_ip(lease, rig.project, server)
    assert rig.cloud.ensure_floating_ip(lease, rig.project, server) == floating   # found again, not a second
    assert lease in rig.cloud.floating_ip_leases()
    rig.wait("the floating IP among the server's addresses", lambda: any(
        (a.ip, a.kind) == (floating, "floating") for a in rig.cloud.server_state(server).addresses))
    rig.cloud.release_floating_ips(lease)
    rig.cloud.release_floating_ips(lease)   # nothing left: a no-op
    assert lease not in rig.cloud.floating_ip_leases()

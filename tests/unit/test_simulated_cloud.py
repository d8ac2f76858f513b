"""The simulated cloud behaves like Nova/Placement/Cinder/Glance at the driver boundary.

What every driver must do is in tests/contract/test_cloud_driver_contract.py, run on this
driver too; here: the simulated cloud's own timing, file format and test hooks."""
from __future__ import annotations

import threading

import pytest

from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.driver import LEASE_TAG, BootRequest, CloudError, ShapeSpec, VolumeRequest
from gpu_tenancy.cloud.simulated import NO_VALID_HOST, SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD
from gpu_tenancy.domain.failures import FailureClass as F

PROJECT = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
OTHER = "ffffeeeeddddccccbbbbaaaa99998888"
IMAGE_ID = "11111111-2222-3333-4444-555555555555"
A100_X4 = ShapeSpec("a100.x4", "A100", 4, 32, 131072, 200, "a100")
A100_X8 = ShapeSpec("a100.x8", "A100", 8, 64, 262144, 400, "a100")
CONFIG = {
    "boot_seconds": 30,
    "delete_seconds": 5,
    "gpu_models": {"A100": {"resource_class": "CUSTOM_PGPU_A100", "pci_alias": "a100"},
                   "H100": {"resource_class": "CUSTOM_PGPU_H100", "pci_alias": "h100"}},
    "hosts": [{"prefix": "gpu-a100-", "count": 2, "gpu_model": "A100", "gpus": 8, "aggregate": "a100"},
              {"name": "gpu-h100-1", "gpu_model": "H100", "gpus": 4}],
    "images": [{"id": IMAGE_ID, "name": "ubuntu-22.04"},
               {"id": "queued-image", "name": "half-uploaded", "status": "queued"}],
}


@pytest.fixture
def clock():
    return VirtualClock(1_700_000_000)


@pytest.fixture
def cloud(clock):
    return SimulatedCloud(CONFIG, clock)


def lease_flavor(cloud, lease, shape=A100_X4, project=PROJECT, units=None) -> str:
    """The lease's class, inventory `units` (host -> VMs) and flavor; the flavor's id."""
    cloud.ensure_lease_class(lease)
    if units is not None:
        cloud.set_lease_inventory(lease, units)
    return cloud.ensure_lease_flavor(lease, project, shape).id


def boot(cloud, lease="lease-1", vm=0, host="gpu-a100-1", shape=A100_X4, project=PROJECT, image="ubuntu-22.04"):
    """The service's boot: one more unit of the lease's class on the host (a known one) first."""
    units = cloud.lease_inventory().get(lease, {})
    if host in {h.name for h in cloud.capacity()}:
        units[host] = units.get(host, 0) + 1
    flavor = lease_flavor(cloud, lease, shape, project, units)
    return cloud.boot(BootRequest(project, lease, vm, host, flavor, image))


def test_config_expands_hosts_and_demo_cloud_loads(cloud, clock):
    assert [(h.name, h.gpus, h.aggregate) for h in cloud.capacity()] == [
        ("gpu-a100-1", 8, "a100"), ("gpu-a100-2", 8, "a100"), ("gpu-h100-1", 4, None)]
    demo = SimulatedCloud.from_file(DEMO_CLOUD, clock)
    assert demo.name == "simulated" and demo.boot_seconds == 20
    assert sorted((h.gpu_model, h.gpus) for h in demo.capacity()) == [("A100", 8)] * 4 + [("H100", 4)] * 2
    for name in ("ubuntu-22.04-cuda-12", "ubuntu-24.04-cuda-12", "rocky-9-cuda-12"):
        demo.check_image(name)


def test_build_then_active_after_boot_seconds(cloud, clock):
    server = boot(cloud)
    assert cloud.server_state(server).status == "BUILD"
    assert cloud.allocations() == {server: ("gpu-a100-1", 4)}  # claimed at boot
    clock.advance(29)
    assert cloud.server_state(server).status == "BUILD"
    clock.advance(1)
    state = cloud.server_state(server)
    assert (state.status, state.host, state.fault) == ("ACTIVE", "gpu-a100-1", None)


def test_no_overcommit_beyond_free_gpus(cloud, clock):
    first = boot(cloud, lease="l1", shape=A100_X4)
    second = boot(cloud, lease="l2", shape=A100_X4)
    third = boot(cloud, lease="l3", shape=A100_X4)  # host is full: 8 of 8 held
    assert cloud.allocations() == {first: ("gpu-a100-1", 4), second: ("gpu-a100-1", 4)}
    clock.advance(30)
    state = cloud.server_state(third)
    assert (state.status, state.fault) == ("ERROR", NO_VALID_HOST)
    assert cloud.gpus_released(third)
    assert len(cloud.allocations()) == 2 and cloud.free_gpus()["gpu-a100-1"] == 0


def test_delete_releases_gpus_after_delete_seconds(cloud, clock):
    server = boot(cloud, shape=A100_X8)
    clock.advance(30)
    cloud.delete_server(server)
    assert cloud.server_state(server).status == "DELETED"
    assert not cloud.gpus_released(server)  # Placement lags behind the API
    clock.advance(5)
    assert cloud.gpus_released(server) and cloud.allocations() == {}
    cloud.delete_server(server)  # no-op when gone
    assert cloud.server_state("no-such-server").status == "DELETED"


def test_a_lease_flavor_asks_for_one_unit_of_the_leases_class_and_only_the_granted_project_sees_it(cloud, clock):
    fid = lease_flavor(cloud, "l1", units={"gpu-a100-2": 1})
    flavor = cloud.flavors()[fid]
    assert flavor["name"] == "gt-lease-l1" and flavor["is_public"] is False and flavor["access"] == []
    assert flavor["extra_specs"] == {"pci_passthrough:alias": "a100:4", "resources:CUSTOM_GT_LEASE_L1": "1"}
    with pytest.raises(CloudError):   # no access yet: the member's boot is refused outright
        cloud.tenant_boot(PROJECT, fid)
    cloud.grant_lease_flavor("l1", PROJECT)
    with pytest.raises(CloudError):   # another project's private flavor is not found
        cloud.tenant_boot(OTHER, fid)
    mine = cloud.tenant_boot(PROJECT, fid, name="mine")
    extra = cloud.tenant_boot(PROJECT, fid)   # beyond the lease's one VM: Placement has no unit
    clock.advance(30)
    assert cloud.server_state(mine).status == "ACTIVE" and cloud.server_state(mine).host == "gpu-a100-2"
    assert cloud.server_state(extra).fault == NO_VALID_HOST
    assert {s.id for s in cloud.lease_servers("l1")} == {mine, extra}
    assert mine not in {o.id for o in cloud.list_tagged()}   # a tenant's server carries no tag of ours
    cloud.revoke_lease_flavor("l1", PROJECT)
    with pytest.raises(CloudError):
        cloud.tenant_boot(PROJECT, fid)


def test_lease_inventory_stays_while_a_server_holds_a_unit_and_the_class_goes_after_it(cloud, clock):
    server = boot(cloud, lease="l1", host="gpu-a100-1")
    boot(cloud, lease="l1", vm=1, host="gpu-a100-1")
    cloud.set_lease_inventory("l1", {"gpu-a100-1": 2, "gpu-a100-2": 1})
    with pytest.raises(CloudError):   # Placement: a class with inventory cannot be deleted
        cloud.remove_lease_class("l1")
    for s in cloud.lease_servers("l1"):
        cloud.delete_server(s.id)
    assert not cloud.remove_lease_inventory("l1")   # GPUs and units not released yet
    assert cloud.lease_inventory() == {"l1": {"gpu-a100-1": 2}}   # removed where nothing held a unit
    clock.advance(5)
    assert cloud.gpus_released(server) and cloud.remove_lease_inventory("l1")
    cloud.remove_lease_flavor("l1")
    cloud.remove_lease_class("l1")
    assert cloud.leases_in_cloud() == set() and cloud.flavors() == {} and cloud.lease_classes() == set()


def test_inventory_needs_the_class_first(cloud):
    with pytest.raises(CloudError):
        cloud.set_lease_inventory("l1", {"gpu-a100-1": 1})
    cloud.ensure_lease_class("l1")
    with pytest.raises(CloudError):
        cloud.set_lease_inventory("l1", {"gpu-nowhere": 1})


def test_racing_tenant_boots_never_give_more_servers_than_the_lease_has_vms(cloud, clock):
    fid = lease_flavor(cloud, "l1", ShapeSpec("a100.x1", "A100", 1, 8, 1024, 10, "a100"),
                       units={"gpu-a100-1": 1, "gpu-a100-2": 1})
    cloud.grant_lease_flavor("l1", PROJECT)
    made = []
    threads = [threading.Thread(target=lambda: made.append(cloud.tenant_boot(PROJECT, fid))) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.advance(30)
    active = [s for s in made if cloud.server_state(s).status == "ACTIVE"]
    assert len(made) == 20 and len(active) == 2
    assert sorted(cloud.server_state(s).host for s in active) == ["gpu-a100-1", "gpu-a100-2"]


def test_each_vm_of_a_lease_is_its_own_server(cloud):
    assert boot(cloud, lease="l1", vm=1) != boot(cloud, lease="l1", vm=0)


def test_a_volume_attaches_only_to_an_active_server_of_its_project(cloud, clock):
    vol = cloud.ensure_volume(PROJECT, "l1", VolumeRequest(size_gb=50))
    theirs = cloud.add_volume(OTHER, 200)
    server = boot(cloud, lease="l1")
    with pytest.raises(CloudError) as err:  # not ACTIVE yet
        cloud.attach_volume(server, vol)
    assert err.value.failure_class == F.VOLUME
    clock.advance(30)
    with pytest.raises(CloudError) as err:  # isolation: another project's looks missing
        cloud.attach_volume(server, theirs)
    assert err.value.failure_class == F.VOLUME and "not found" in err.value.message


@pytest.mark.parametrize("operation, call", [
    ("ensure_lease_flavor", lambda c: c.ensure_lease_flavor("l1", PROJECT, A100_X4)),
    ("grant_lease_flavor", lambda c: lease_flavor(c, "l1") and c.grant_lease_flavor("l1", PROJECT)),
    ("ensure_volume", lambda c: c.ensure_volume(PROJECT, "l1", VolumeRequest(size_gb=10))),
    ("boot", lambda c: boot(c)),
    ("check_image", lambda c: c.check_image(IMAGE_ID)),
    ("delete_server", lambda c: c.delete_server("whatever")),
])
def test_injected_failures_raise_exactly_times(cloud, operation, call):
    cloud.inject_failure(operation, F.API_ERROR, times=2)
    for _ in range(2):
        with pytest.raises(CloudError) as err:
            call(cloud)
        assert err.value.failure_class == F.API_ERROR and err.value.cloud_message
    call(cloud)  # the third call works


def test_injected_attach_failure(cloud, clock):
    vol = cloud.ensure_volume(PROJECT, "l1", VolumeRequest(size_gb=10))
    server = boot(cloud, lease="l1")
    clock.advance(30)
    cloud.inject_failure("attach_volume", F.VOLUME, message="Cinder is on fire")
    with pytest.raises(CloudError) as err:
        cloud.attach_volume(server, vol)
    assert (err.value.failure_class, err.value.cloud_message) == (F.VOLUME, "Cinder is on fire")
    cloud.attach_volume(server, vol)
    assert cloud.volume_status(vol) == "in-use"


def test_injected_server_error_goes_error_after_build(cloud, clock):
    cloud.inject_failure("server_error", F.HOST_DOWN)
    failed = boot(cloud, lease="l1")
    assert cloud.server_state(failed).status == "BUILD"
    clock.advance(30)
    state = cloud.server_state(failed)
    assert state.status == "ERROR" and "down" in state.fault.lower()
    assert cloud.gpus_released(failed)  # a failed build gives its claim back
    assert cloud.server_state(boot(cloud, lease="l2")).status == "BUILD"  # only once
    cloud.inject_failure("server_error", F.BOOT_TIMEOUT)
    stuck = boot(cloud, lease="l3")
    clock.advance(10_000)
    assert cloud.server_state(stuck).status == "BUILD"


def test_images_are_found_by_name_too_and_a_boot_checks_its_image(cloud):
    cloud.check_image("ubuntu-22.04")
    with pytest.raises(CloudError) as err:
        boot(cloud, image="no-such-image")
    assert err.value.failure_class == F.IMAGE


def test_down_or_disabled_host_gets_no_valid_host(cloud, clock):
    cloud.set_host_state("gpu-a100-1", up=False)
    cloud.set_host_state("gpu-a100-2", enabled=False)
    assert {h.name: (h.up, h.enabled) for h in cloud.capacity()}["gpu-a100-1"] == (False, True)
    down = boot(cloud, lease="l1", host="gpu-a100-1")
    disabled = boot(cloud, lease="l2", host="gpu-a100-2")
    unknown = boot(cloud, lease="l3", host="gpu-nowhere")
    clock.advance(30)
    for server in (down, disabled, unknown):
        assert cloud.server_state(server).fault == NO_VALID_HOST
    assert cloud.allocations() == {}
    cloud.set_host_state("gpu-a100-1", up=True)
    back = boot(cloud, lease="l4", host="gpu-a100-1")
    clock.advance(30)
    assert cloud.server_state(back).status == "ACTIVE"


def test_list_tagged_shows_a_servers_tag_as_its_metadata(cloud):
    server = boot(cloud, lease="l1")
    cloud.ensure_volume(PROJECT, "l1", VolumeRequest(size_gb=10))
    objects = {(o.kind, o.id): o for o in cloud.list_tagged()}
    assert objects[("server", server)].attrs["metadata"] == {LEASE_TAG: "l1"}
    assert sorted(kind for kind, _ in objects) == ["flavor", "server", "volume"]


def test_concurrent_boots_never_overcommit(cloud, clock):
    fid = lease_flavor(cloud, "l1", ShapeSpec("a100.x1", "A100", 1, 8, 1024, 10, "a100"), units={"gpu-a100-1": 40})

    def boot_many(start):
        for i in range(start, start + 10):
            cloud.boot(BootRequest(PROJECT, "l1", i, "gpu-a100-1", fid, IMAGE_ID))

    threads = [threading.Thread(target=boot_many, args=(n * 10,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cloud.allocations()) == 8 and cloud.free_gpus()["gpu-a100-1"] == 0


def test_a_shelve_on_a_host_that_is_down_waits_for_the_host_as_novas_compute_would(cloud, clock):
    """Asked while its host is down, or under way when it goes down, a shelve does nothing there
    (ACTIVE, task shelving, its GPUs held) until the host is up again; then it offloads."""
    asked_down, under_way = boot(cloud, lease="l1"), boot(cloud, lease="l2")
    clock.advance(30)
    cloud.shelve(under_way)
    clock.advance(2)
    cloud.set_host_state("gpu-a100-1", up=False)
    cloud.shelve(asked_down)
    clock.advance(600)
    for server in (asked_down, under_way):
        state = cloud.server_state(server)
        assert (state.status, state.task) == ("ACTIVE", "shelving") and not cloud.gpus_released(server)
    cloud.shelve(asked_down)   # asked again: still nothing there
    cloud.set_host_state("gpu-a100-1", up=True)
    clock.advance(5)
    assert [cloud.server_state(s).status for s in (asked_down, under_way)] == ["SHELVED_OFFLOADED"] * 2
    assert cloud.allocations() == {}
    done = boot(cloud, lease="l3")   # one offloaded before its host goes down stays offloaded
    clock.advance(30)
    cloud.shelve(done)
    clock.advance(5)
    cloud.set_host_state("gpu-a100-1", up=False)
    assert cloud.server_state(done).status == "SHELVED_OFFLOADED" and cloud.gpus_released(done)

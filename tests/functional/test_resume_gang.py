"""A parked lease of several VMs whose resume loses one of them (engine/resume.py
boot_lost_again): only the lost VM is booted again from its image, on another host; the VMs
that came off the shelf keep their disks."""
from __future__ import annotations

import pytest

from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.engine import park
from gpu_tenancy.timeutil import parse_time
from tests.conftest import headers
from tests.functional.test_idle_rules import lease_of
from tests.functional.test_park import events, holds_at_every_instant
from tests.functional.test_park_hosts import slot
from tests.functional.test_park_retry import failures, until

GANG = {"shape": "a100.x8", "instances": 2, "duration": "PT8H", "volume": {"size_gb": 10}}


def ticks_until(client, engine_tick, lease_id: str, status: str, step: int = 10, most: int = 12) -> dict:
    for _ in range(most):
        lease = lease_of(client, lease_id)
        if lease["status"] == status:
            return lease
        engine_tick(advance=step)
    raise AssertionError(f"lease {lease_id} is {lease_of(client, lease_id)['status']}, not {status}")


@pytest.fixture
def parked_gang(client, runtime, engine_tick):
    """ml-vision's lease of two A100 VMs of 8 GPUs with a data volume, run, then parked."""
    lease_id = client.post("/v1/leases", json=GANG, headers=headers()).get_json()["lease"]["id"]
    engine_tick()
    running = ticks_until(client, engine_tick, lease_id, "active")
    park.begin(runtime.engine.lifecycle, lease_id, "idle for 20 minutes")
    parked = ticks_until(client, engine_tick, lease_id, "parked")
    return dict(id=lease_id, before=running, parked=parked)


def test_a_gang_resume_that_loses_one_vm_boots_only_that_one_again_elsewhere(client, runtime, engine_tick, cloud,
                                                                             parked_gang):
    lease_id, before = parked_gang["id"], parked_gang["before"]
    vms = {s["instance"]: (s["id"], s["host"]) for s in before["servers"]}
    hosts, slot_at = slot(parked_gang["parked"])
    remaining = parked_gang["parked"]["park"]["remaining"]
    volume = before["volume"]["id"]
    assert cloud.volumes()[volume]["attached_to"] == vms[0][0]
    cloud.inject_failure("unshelve_error", F.NO_VALID_HOST)   # the first unshelve: VM 0's
    until(runtime, engine_tick, slot_at)
    lease = ticks_until(client, engine_tick, lease_id, "active", most=20)
    now_vms = {s["instance"]: (s["id"], s["host"]) for s in lease["servers"]}
    lost_host = {a["host"] for a in parked_gang["parked"]["allocations"] if a["instance"] == 0}.pop()
    # VM 1 unshelved with its disk: the same server; VM 0 a new one, not on the host that failed it
    assert now_vms[1][0] == vms[1][0], (vms, now_vms)
    assert now_vms[0][0] != vms[0][0] and now_vms[0][1] != lost_host, (vms, now_vms)
    assert vms[0][0] not in cloud.servers()
    assert sorted(sid for sid, s in cloud.servers().items() if s["lease_id"] == lease_id) == sorted(
        server for server, _ in now_vms.values())
    assert cloud.volumes()[volume]["attached_to"] == now_vms[0][0]
    assert failures(lease) == [("no_valid_host", "retried", [lost_host])]
    assert parse_time(lease["end"]) == slot_at + remaining, (lease["end"], slot_at, remaining)
    told = [e["message"] for e in events(client, lease_id) if e["kind"] == "failure"]
    assert len(told) == 1 and "VM 0" in told[0] and "keeps its disk" in told[0], told
    assert hosts >= {now_vms[1][1]}
    holds_at_every_instant(runtime)


def test_a_gang_resume_that_loses_one_vm_with_no_host_free_for_it_now_boots_the_whole_lease_again(
        client, runtime, engine_tick, cloud, parked_gang):
    """The two other A100 hosts are taken till after the lease's end: the lost VM can go nowhere
    now, so the lease is booted again whole when hosts come free, as before (the VM that came
    off the shelf cannot wait, holding its GPUs, for another host)."""
    lease_id, before = parked_gang["id"], parked_gang["before"]
    kept = {s["instance"]: s["id"] for s in before["servers"]}[1]
    hosts, slot_at = slot(parked_gang["parked"])
    for _ in range(2):
        taken = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "P2D"},
                            headers=headers("nlp-lab")).get_json()["lease"]
        assert taken["status"] == "scheduled" and taken["allocations"][0]["host"] not in hosts, taken
    engine_tick(advance=10)
    cloud.inject_failure("unshelve_error", F.NO_VALID_HOST)
    until(runtime, engine_tick, slot_at)
    for _ in range(4):
        engine_tick(advance=10)
    lease = lease_of(client, lease_id)
    assert lease["status"] in ("scheduled", "queued"), lease["status"]
    assert [(f[0], f[1]) for f in failures(lease)] == [("no_valid_host", "retried")]
    assert kept not in cloud.servers() or cloud.servers()[kept]["status"] == "DELETED"
    assert not [s for s in cloud.servers().values() if s["lease_id"] == lease_id and s["status"] != "DELETED"]
    holds_at_every_instant(runtime)


def test_a_vm_whose_shelved_snapshot_is_gone_is_booted_again_from_the_leases_image_not_failed(
        client, runtime, engine_tick, cloud, parked_gang):
    """Nova puts a VM whose shelved snapshot was deleted from Glance in ERROR with "Unshelve
    attempted but the image ... cannot be found" (seen on the loopback cloud). That image is
    the service's snapshot, not the lease's: the lease's own image still boots, so the VM is
    lost off the shelf (booted again alone), not an image failure that ends the lease."""
    lease_id, before = parked_gang["id"], parked_gang["before"]
    vms = {s["instance"]: s["id"] for s in before["servers"]}
    _, slot_at = slot(parked_gang["parked"])
    cloud.inject_failure("unshelve_error", F.IMAGE, message="Unshelve attempted but the image "
                         "0b6f3c5e-8c1d-4a57-9a43-5d1b9c2e7f10 cannot be found.")
    until(runtime, engine_tick, slot_at)
    lease = ticks_until(client, engine_tick, lease_id, "active", most=20)
    now_vms = {s["instance"]: s["id"] for s in lease["servers"]}
    assert now_vms[1] == vms[1] and now_vms[0] != vms[0], (vms, now_vms)
    assert [(f[0], f[1]) for f in failures(lease)] == [("api_error", "retried")]
    told = [e["message"] for e in events(client, lease_id) if e["kind"] == "failure"]
    assert len(told) == 1 and "snapshot" in told[0], told
    holds_at_every_instant(runtime)


def test_a_single_vm_whose_shelved_snapshot_is_gone_is_booted_again_whole(client, runtime, engine_tick, cloud):
    lease_id = client.post("/v1/leases", json={**GANG, "instances": 1}, headers=headers()).get_json()["lease"]["id"]
    engine_tick()
    ticks_until(client, engine_tick, lease_id, "active")
    park.begin(runtime.engine.lifecycle, lease_id, "idle for 20 minutes")
    _, slot_at = slot(ticks_until(client, engine_tick, lease_id, "parked"))
    cloud.inject_failure("unshelve_error", F.IMAGE, message="Unshelve attempted but the image "
                         "0b6f3c5e-8c1d-4a57-9a43-5d1b9c2e7f10 cannot be found.")
    until(runtime, engine_tick, slot_at)
    lease = ticks_until(client, engine_tick, lease_id, "active", most=40)
    assert [(f[0], f[1]) for f in failures(lease)] == [("api_error", "retried")]
    holds_at_every_instant(runtime)

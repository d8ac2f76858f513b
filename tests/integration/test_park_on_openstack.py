"""Parking an idle lease on the loopback cloud (an idle rule's `then: park`, engine/park.py
and engine/resume.py): a lease whose agent reports its GPUs idle is warned, then parked (its
server shelved and offloaded, its GPUs free in Placement), the waiting lease gets the GPUs,
and at the held slot the lease resumes: its server ACTIVE again with the same volume
attached. The engine is ticked by the test on a virtual clock, so the rule's minutes and the
waiting lease's hour pass at once; the cloud's own steps take their real time (printed)."""
from __future__ import annotations

import time

import pytest

from gpu_tenancy.config import idle_rules
from gpu_tenancy.engine import park
from tests.integration.conftest import auth, gpu_usage, wait_for
from tests.integration.test_idle_on_openstack import MINUTE, report_idle
from tests.integration.test_leases_on_openstack import api, create, placement_gpus, tick_until  # noqa: F401
from gpu_tenancy.timeutil import parse_time


@pytest.fixture
def keystone_config(keystone_config):
    keystone_config.readiness_url = "http://127.0.0.1:9"   # the VMs run no probe here
    keystone_config.idle_rule_set = idle_rules([{"warn_after_minutes": 2, "then": "park", "then_after_minutes": 4}])
    keystone_config.park_grace_seconds = 60
    return keystone_config


def test_an_idle_lease_is_parked_its_gpus_go_to_the_waiting_lease_and_it_resumes_at_its_slot(
        os_app, api, tokens, admin):
    alice, bob = tokens["gt-alice"], tokens["gt-bob"]
    runtime = os_app.extensions["gpu_tenancy"]
    idle = create(api, alice, shape="a100.x4", instances=2, readiness_probe=True, duration="PT8H",
                  volume={"size_gb": 1})
    token = idle["readiness"]["token"]
    waiting = create(api, bob, shape="a100.x4", duration="PT20M")
    assert waiting["status"] == "queued"
    active = tick_until(os_app, api, alice, idle["id"], "active")
    servers = {s["instance"]: (s["id"], s["host"]) for s in active["servers"]}
    volume = active["volume"]["id"]
    assert sorted(h for _, h in servers.values()) == ["gpu-a100-1", "gpu-a100-2"]
    assert admin.block_storage.get_volume(volume).status == "in-use"

    warned = False
    for _ in range(6):
        report_idle(api, idle["id"], token)
        runtime.clock.advance(MINUTE)
        runtime.engine.run_once()
        events = api.get(f"/v1/leases/{idle['id']}/events", headers=auth(alice)).get_json()["events"]
        warned = warned or any(e["kind"] == "warning" and "parked after 4 idle minutes" in e["message"]
                               for e in events)
        if any(e["to"] == "parking" for e in events):
            break
    assert warned
    began = time.monotonic()
    parked = tick_until(os_app, api, alice, idle["id"], "parked")
    shelve_seconds = time.monotonic() - began
    for server_id, _ in servers.values():
        assert admin.compute.get_server(server_id).status == "SHELVED_OFFLOADED"
        assert placement_gpus(admin, server_id) == {}                    # its GPUs free in Placement
    slot = parse_time(parked["park"]["resume_by"])

    started = tick_until(os_app, api, bob, waiting["id"], "active")     # the waiting lease gets them
    host = started["servers"][0]["host"]
    assert placement_gpus(admin, started["servers"][0]["id"]) == {host: 4}
    assert sum(gpu_usage(admin).values()) == 4
    assert slot >= parse_time(started["end"])                         # the held slot comes after it

    runtime.clock.advance(parse_time(started["end"]) - runtime.clock.now())
    tick_until(os_app, api, bob, waiting["id"], "ended")
    runtime.clock.advance(max(0, slot - runtime.clock.now()))
    began = time.monotonic()
    back = tick_until(os_app, api, alice, idle["id"], "active", timeout=300)
    unshelve_seconds = time.monotonic() - began
    print(f"\nloopback: shelve to SHELVED_OFFLOADED {shelve_seconds:.1f} s, unshelve to ACTIVE "
          f"{unshelve_seconds:.1f} s")
    assert back["park"] is None
    slot_hosts = {a["instance"]: a["host"] for a in back["allocations"]}
    for vm, (server_id, _) in servers.items():
        nova = admin.compute.get_server(server_id)
        assert (nova.status, nova.compute_host) == ("ACTIVE", slot_hosts[vm])
        assert placement_gpus(admin, server_id) == {slot_hosts[vm]: 4}
    kept = admin.block_storage.get_volume(volume)
    assert kept.status == "in-use" and [a["server_id"] for a in kept.attachments] == [servers[0][0]]
    events = api.get(f"/v1/leases/{idle['id']}/events", headers=auth(alice)).get_json()["events"]
    assert [e["to"] for e in events if e["to"]][-4:] == ["parking", "parked", "resuming", "active"]

    assert api.delete(f"/v1/leases/{idle['id']}", headers=auth(alice)).status_code == 204
    tick_until(os_app, api, alice, idle["id"], "ended")
    assert not any(gpu_usage(admin).values())


def test_a_gang_resume_that_loses_one_vm_boots_it_again_alone_with_the_data_volume(os_app, api, tokens, admin):
    """Nova cannot unshelve a VM whose shelved snapshot is gone (ERROR); the other VM comes off
    the shelf with its disk, and only the lost one is booted again from the image
    (engine/resume_lost.py), on another host than the one that failed it, with the lease's
    data volume, which the lost VM held, attached to it again."""
    alice = tokens["gt-alice"]
    runtime = os_app.extensions["gpu_tenancy"]
    lease = create(api, alice, shape="a100.x2", instances=2, duration="PT8H", volume={"size_gb": 1})
    active = tick_until(os_app, api, alice, lease["id"], "active")
    before = {s["instance"]: s["id"] for s in active["servers"]}
    volume = active["volume"]["id"]
    assert [a["server_id"] for a in admin.block_storage.get_volume(volume).attachments] == [before[0]]

    park.begin(runtime.engine.lifecycle, lease["id"], "parked by the test")
    parked = tick_until(os_app, api, alice, lease["id"], "parked")
    lost_host = next(a["host"] for a in parked["allocations"] if a["instance"] == 0)
    snapshots = [i for i in admin.image.images() if getattr(i, "instance_uuid", None) == before[0]]
    assert len(snapshots) == 1, [(i.name, i.id) for i in snapshots]
    admin.image.delete_image(snapshots[0])                               # VM 0 cannot come off the shelf

    runtime.clock.advance(max(0, parse_time(parked["park"]["resume_by"]) - runtime.clock.now()))
    back = tick_until(os_app, api, alice, lease["id"], "active", timeout=300)
    after = {s["instance"]: (s["id"], s["host"]) for s in back["servers"]}
    assert after[1][0] == before[1]                                    # unshelved: the same server
    assert after[0][0] != before[0] and after[0][1] != lost_host, (before, after, lost_host)
    wait_for("the lost VM to be gone", lambda: not any(s.id == before[0] for s in admin.compute.servers()))
    for vm, (server_id, host) in after.items():
        nova = admin.compute.get_server(server_id)
        assert (nova.status, nova.compute_host) == ("ACTIVE", host), vm
        assert placement_gpus(admin, server_id) == {host: 2}
    assert [a["server_id"] for a in admin.block_storage.get_volume(volume).attachments] == [after[0][0]]
    events = api.get(f"/v1/leases/{lease['id']}/events", headers=auth(alice)).get_json()["events"]
    assert [e["to"] for e in events if e["to"]][-4:] == ["parked", "resuming", "provisioning", "active"]

    assert api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice)).status_code == 204
    tick_until(os_app, api, alice, lease["id"], "ended")
    assert not any(gpu_usage(admin).values())
    wait_for("the data volume to be kept, detached", lambda: admin.block_storage.get_volume(volume).status
             == "available")

"""A parked lease's held resume slot on a host that goes down or is drained: moved by the
planner to another host (it stays parked, resume_by from the new slot), or, when no host can
ever take it back, the lease ends as one parked with no host does. And the inverse: a lease
parking, or about to resume, when its host goes down."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine import held, park as lease_park, resume as lease_resume
from gpu_tenancy.timeutil import parse_time
from tests.conftest import PG_URL, headers
from tests.functional.test_host_failure import host_goes
from tests.functional.test_hosts import ADMIN
from tests.functional.test_idle_rules import lease_of, minutes
from tests.functional.test_park import (config, events, holds_at_every_instant, parked, running,  # noqa: F401
                                        until_resumed)
from tests.races import Held, race


def slot(lease) -> tuple[set[str], int]:
    """The hosts and start of a parked lease's held slot, checked against its resume_by."""
    starts = {parse_time(a["start"]) for a in lease["allocations"]}
    assert starts == {parse_time(lease["park"]["resume_by"])}, lease
    return {a["host"] for a in lease["allocations"]}, starts.pop()


def other_h100(host: str) -> str:
    return "gpu-h100-2" if host == "gpu-h100-1" else "gpu-h100-1"


def notices(runtime, lease) -> list[tuple[str, dict]]:
    """The lease's webhook notices in the outbox, oldest first: (event, body)."""
    with session_scope(runtime.sessions) as session:
        return [(d.event, json.loads(d.body)) for d in session.scalars(
            select(m.WebhookDelivery).where(m.WebhookDelivery.lease_id == lease).order_by(m.WebhookDelivery.id))]


def test_a_parked_lease_whose_slot_host_goes_down_is_held_a_slot_elsewhere_and_resumes_there(
        client, runtime, engine_tick, cloud, parked):
    idle = parked["idle"]
    before = lease_of(client, idle)
    [lost], held_from = slot(before)
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    after = lease_of(client, idle)
    assert after["status"] == "parked"
    hosts, resume_by = slot(after)
    assert hosts == {other_h100(lost)} and resume_by >= held_from
    assert parse_time(after["end"]) - resume_by == before["park"]["remaining"]   # its time left, whole
    told = [e["message"] for e in events(client, idle) if e["kind"] == "host_failure"]
    assert len(told) == 1 and lost in told[0] and other_h100(lost) in told[0], told
    event, body = notices(runtime, idle)[-1]   # the tenant's webhook is told the new resume_by
    assert event == "lease.parked" and parse_time(body["lease"]["resume_by"]) == resume_by
    # the lease that ran on the lost host was in use: it goes before the idle one's slot
    rescued = lease_of(client, parked["waiting"], "nlp-lab")
    assert parse_time(rescued["end"]) <= resume_by
    back = until_resumed(client, runtime, engine_tick, idle, resume_by)
    assert back["status"] == "active" and {s["host"] for s in back["servers"]} == {other_h100(lost)}
    assert cloud.volumes()[parked["volume"]]["attached_to"] == back["servers"][0]["id"]


def test_draining_the_slot_host_moves_a_parked_leases_slot(client, runtime, engine_tick, parked):
    idle = parked["idle"]
    [host], held_from = slot(lease_of(client, idle))
    reply = client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN)
    assert reply.status_code == 200
    # the drained host is empty once the lease running there ends: no parked lease comes back to it
    running_there = lease_of(client, parked["waiting"], "nlp-lab")
    assert running_there["status"] in ("provisioning", "active") and running_there["allocations"][0]["host"] == host
    assert parse_time(reply.get_json()["host"]["held_until"]) <= held_from
    after = lease_of(client, idle)
    assert after["status"] == "parked"
    hosts, resume_by = slot(after)
    assert hosts == {other_h100(host)} and resume_by >= held_from
    told = [e["message"] for e in events(client, idle) if e["kind"] == "host_drain"]
    assert len(told) == 1 and host in told[0], told
    holds_at_every_instant(runtime)
    engine_tick(advance=60)
    assert slot(lease_of(client, idle)) == (hosts, resume_by)   # the engine leaves it there


def test_a_moved_slot_tells_the_projects_webhook_its_new_resume_by(client, runtime, parked):
    """The lease.parked notice said when the lease resumes; once its slot moves, that is stale:
    the notice goes again, with the new slot, through the same outbox."""
    idle = parked["idle"]
    [host], held_from = slot(lease_of(client, idle))
    assert [e for e, _ in notices(runtime, idle)] == ["lease.idle", "lease.parked"]
    assert client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN).status_code == 200
    _, resume_by = slot(lease_of(client, idle))
    sent = notices(runtime, idle)
    assert [e for e, _ in sent] == ["lease.idle", "lease.parked", "lease.parked"]
    first, again = sent[1][1], sent[2][1]
    assert parse_time(first["lease"]["resume_by"]) == held_from
    assert parse_time(again["lease"]["resume_by"]) == resume_by and again["lease"]["status"] == "parked"
    assert again["lease"]["end"] == lease_of(client, idle)["end"]
    assert other_h100(host) in again["message"] and "moved" in again["message"]


def test_a_parked_lease_no_host_can_take_back_ends_and_keeps_its_volume(client, runtime, engine_tick, cloud,
                                                                        parked):
    """Its slot's host down and the only other of its model drained: it cannot resume anywhere,
    so it ends as a lease parked with no host to take it back does; the shelved VMs go, the
    data volume stays the tenant's."""
    idle = parked["idle"]
    [host], _ = slot(lease_of(client, idle))
    assert client.patch(f"/v1/hosts/{other_h100(host)}", json={"drained": True}, headers=ADMIN).status_code == 200
    assert lease_of(client, idle)["status"] == "parked"
    host_goes(runtime, cloud, engine_tick, host, up=False)
    engine_tick(advance=10)
    engine_tick(advance=10)
    lease = lease_of(client, idle)
    assert lease["status"] == "ended", lease["status"]
    said = " ".join(e["message"] for e in events(client, idle))
    assert host in said and "no host can take it back" in said
    assert parked["before"]["servers"][0]["id"] not in cloud.servers()
    assert cloud.volumes()[parked["volume"]]["status"] == "available"
    holds_at_every_instant(runtime)


def test_a_host_down_as_the_slot_comes_moves_the_slot_rather_than_resume_onto_it(client, runtime, engine_tick,
                                                                                 cloud, parked):
    idle = parked["idle"]
    [host], resume_by = slot(lease_of(client, idle))
    while runtime.clock.now() < resume_by - 120:
        engine_tick(advance=min(600, resume_by - 120 - runtime.clock.now()))
    assert lease_of(client, idle)["status"] == "parked"
    cloud.set_host_state(host, up=False)
    engine_tick(advance=120)   # the refresh that sees it down, at the slot's start
    after = lease_of(client, idle)
    assert after["status"] == "parked" and after["failure"] is None
    assert slot(after)[0] == {other_h100(host)}
    holds_at_every_instant(runtime)


def test_a_lease_whose_host_goes_down_while_parking_parks_without_its_vms_and_boots_again_at_its_slot(
        client, runtime, engine_tick, cloud):
    """Its host went down before the shelve was done, so the VM and its disk are on the dead host:
    the shelve could never finish there (the lease waited boot_timeout_seconds, then failed, its
    time lost). The VM is deleted and the lease parks at once, its time left held on the other
    host; at the slot it is booted again from its image with its data volume."""
    client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": "http://127.0.0.1:9/hook"}}, headers=headers())
    idle, token = running(client, engine_tick, "ml-vision", volume={"size_gb": 10})
    busy, busy_token = running(client, engine_tick, "nlp-lab")
    minutes(client, engine_tick, 20, [(idle, token, [0, 0, 0, 0]), (busy, busy_token, [90, 90, 90, 90])])
    lease = lease_of(client, idle)
    assert lease["status"] == "parking"
    lost, [server] = lease["allocations"][0]["host"], lease["servers"]
    volume = lease["volume"]["id"]
    assert cloud.servers()[server["id"]]["status"] == "SHELVED"   # shelve asked, not offloaded yet
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    engine_tick(advance=10)
    after = lease_of(client, idle)
    assert after["status"] == "parked" and after["servers"] == [], after
    hosts, resume_by = slot(after)
    assert hosts == {other_h100(lost)}   # the held slot is never planned on a down host
    parking_at = next(parse_time(e["at"]) for e in events(client, idle) if e["to"] == "parking")
    remaining = after["park"]["remaining"]
    assert remaining == parse_time(lease["end"]) - parking_at and parse_time(after["end"]) - resume_by == remaining
    assert cloud.server_state(server["id"]).status == "DELETED" and cloud.volumes()[volume]["attached_to"] is None
    [failure] = after["failures"]
    assert (failure["class"], failure["action"], failure["hosts"]) == ("host_down", "replaced", [lost])
    told = [e["message"] for e in events(client, idle) if e["kind"] == "host_failure"]
    assert len(told) == 1 and "disks there are gone" in told[0] and "booted again from its image" in told[0]
    assert notices(runtime, idle)[-1][0] == "lease.parked"
    assert idle not in cloud.lease_inventory()   # as at a park: nobody boots its flavor outside its slot
    back = until_resumed(client, runtime, engine_tick, idle, resume_by)
    assert back["status"] == "active" and back["park"] is None, back
    [new_server] = back["servers"]
    assert new_server["id"] != server["id"] and new_server["host"] == other_h100(lost)
    assert cloud.volumes()[volume]["attached_to"] == new_server["id"]
    # its time left whole, from when it was booted again (the boot's seconds are not taken from it)
    assert resume_by + remaining <= parse_time(back["end"]) <= resume_by + remaining + 60
    assert [e["to"] for e in events(client, idle) if e["to"]][-6:] == ["parking", "parked", "resuming", "scheduled",
                                                                      "provisioning", "active"]
    assert notices(runtime, idle)[-1][0] == "lease.resumed"


@pytest.mark.skipif(not PG_URL, reason="on SQLite every transaction holds the database's write lock from its start")
def test_a_drain_while_the_engine_begins_the_resume_leaves_the_lease_resuming_where_it_is(
        app, client, runtime, engine_tick, db_url, monkeypatch, parked):
    """The engine past its check that the slot's GPUs are free, the lease's row locked: the drain
    waits for it, then finds the lease resuming (running: it runs to its end there), rather than
    move the slot it is being unshelved on."""
    idle = parked["idle"]
    [host], resume_by = slot(lease_of(client, idle))
    assert client.delete(f"/v1/leases/{parked['waiting']}", headers=headers("nlp-lab")).status_code == 204
    engine_tick(advance=10)
    engine_tick(advance=10)   # its GPUs released: nothing holds the slot's
    runtime.clock.set(resume_by)
    point = Held(lambda out, session, row, *rest: row.id == idle)
    monkeypatch.setattr(held, "unreleased_on", point.around(held.unreleased_on))

    def resume() -> None:
        lease_resume.begin_resume(runtime.engine.lifecycle, idle, "its held resume slot has come")

    def drain() -> int:
        return app.test_client().patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN).status_code
    _, drained = race(db_url, point, resume, drain)
    assert drained == 200
    lease = lease_of(client, idle)
    assert lease["status"] in ("resuming", "active") and {a["host"] for a in lease["allocations"]} == {host}
    assert not [e for e in events(client, idle) if e["kind"] == "host_drain"]


def parked_without_vms(client, runtime, engine_tick, cloud) -> tuple[str, str]:
    """ml-vision's idle lease parked without its VM, its host down before the shelve was done;
    nlp-lab's busy lease on the other H100 host. (lease, the host lost)."""
    idle, token = running(client, engine_tick, "ml-vision", volume={"size_gb": 10})
    busy, busy_token = running(client, engine_tick, "nlp-lab")
    minutes(client, engine_tick, 20, [(idle, token, [0, 0, 0, 0]), (busy, busy_token, [90, 90, 90, 90])])
    lost = lease_of(client, idle)["allocations"][0]["host"]
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    engine_tick(advance=10)
    assert lease_of(client, idle)["status"] == "parked"
    return idle, lost


def test_a_resume_asked_then_its_host_down_boots_a_lease_parked_without_vms_again(client, runtime, engine_tick,
                                                                                 cloud):
    """Resumed at once on its host, back up, which goes down again before the next pass: with no
    VM on the shelf there is nothing to park again (it was parked again, "its VMs stay on the
    shelf", a second host_down attempt spent and its slot hours later): it is booted again elsewhere."""
    idle, lost = parked_without_vms(client, runtime, engine_tick, cloud)
    host_goes(runtime, cloud, engine_tick, lost, up=True)
    reply = client.post(f"/v1/leases/{idle}/resume", headers=headers())
    assert reply.status_code == 200 and lease_of(client, idle)["status"] == "resuming", reply.get_json()
    cloud.set_host_state(lost, up=False)
    runtime.engine.lifecycle.refresh_hosts()
    engine_tick()
    after = lease_of(client, idle)
    assert after["status"] in ("scheduled", "queued", "provisioning"), after["status"]
    assert lost not in {a["host"] for a in after["allocations"]}
    assert [f["class"] for f in after["failures"]] == ["host_down"]
    assert not any("stay on the shelf" in e["message"] for e in events(client, idle))


def running_pair(client, engine_tick) -> tuple[dict, dict, dict]:
    """ml-vision's lease of two A100 VMs of 8 GPUs, active: the lease as made, and its VMs 0 and 1."""
    made = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT8H", "instances": 2},
                       headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    lease = lease_of(client, made["id"])
    assert lease["status"] == "active"
    first, second = sorted(lease["servers"], key=lambda s: s["instance"])
    return made, first, second


def test_a_vm_offloaded_before_its_host_went_down_keeps_the_lease_parking(client, runtime, engine_tick, cloud):
    """Two VMs. The one on the host that goes down was on the shelf already (its disk in the image
    store); the other, on a host that stays up, is still being shelved: nothing is lost, and the
    park goes on (every VM was deleted, disks and all)."""
    made, first, second = running_pair(client, engine_tick)
    lc = runtime.engine.lifecycle
    lease_park.begin(lc, made["id"], "idle")
    runtime.clock.advance(2)
    cloud.set_host_state(second["host"], up=False)   # its shelve stalls, then starts over 3 s later
    runtime.clock.advance(1)
    cloud.set_host_state(second["host"], up=True)
    runtime.clock.advance(3)
    assert [cloud.server_state(s["id"]).status for s in (first, second)] == ["SHELVED_OFFLOADED", "SHELVED"]
    cloud.set_host_state(first["host"], up=False)
    lc.refresh_hosts()
    engine_tick()
    assert lease_of(client, made["id"])["status"] == "parking"
    engine_tick(advance=10)
    after = lease_of(client, made["id"])
    assert after["status"] == "parked" and after["failures"] == []
    assert [cloud.server_state(s["id"]).status for s in (first, second)] == ["SHELVED_OFFLOADED"] * 2


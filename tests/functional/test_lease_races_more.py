"""More of tests/functional/test_lease_races.py's kind, on PostgreSQL: an engine step that
picked a lease by what it read without the lease's lock, and a request that moved the lease
before the step took it."""
from __future__ import annotations

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, session_scope, to_epoch
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import host_failure, park, resume
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers
from tests.functional.test_lease_races import ADMIN, NLP, pytestmark, state, status_code
from tests.races import Held, race

__all__ = ["pytestmark"]
VISION = headers("ml-vision")
H100_HOST = {"shape": "h100.x4", "duration": "PT2H"}   # the demo cloud has two H100 hosts of 4 GPUs


def test_a_start_due_while_a_drain_moves_the_lease_later_waits_for_its_new_start(app, runtime, sessions, cloud,
                                                                                 db_url, monkeypatch):
    """The engine's pass has listed a lease whose start is due; a drain of its host moves it to
    the other host from later (that host is free now, but booked from within the hour): the
    start finds the lease scheduled later and boots nothing (it booted it at once on the other
    host, under the booked lease, outside its planned window)."""
    client = app.test_client()
    now = runtime.clock.now()
    booked = client.post("/v1/leases", json={**H100_HOST, "start": rfc3339(now + 3600)},
                         headers=VISION).get_json()["lease"]
    assert booked["status"] == "scheduled", booked
    lid = client.post("/v1/leases", json=H100_HOST, headers=NLP).get_json()["lease"]["id"]
    before = state(sessions, cloud, lid)
    assert before["status"] == "scheduled", before
    host = before["allocations"][0][0]
    lc = runtime.engine.lifecycle
    point = Held(lambda out, status, **kwargs: status is LeaseState.SCHEDULED and lid in out)
    monkeypatch.setattr(lc, "ids", point.around(lc.ids))

    def start_due() -> None:   # the engine's pass, after its replan
        for lease_id in lc.ids(LeaseState.SCHEDULED, start_by=lc.clock.now()):
            lc.start(lease_id)
    _, drained = race(db_url, point, start_due,
                      lambda: status_code(client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN)))
    after = state(sessions, cloud, lid)
    assert drained == 200, drained
    lease = client.get(f"/v1/leases/{lid}", headers=NLP).get_json()["lease"]
    assert after["status"] == "scheduled" and after["vms"] == [], after
    assert host not in [h for h, _ in after["allocations"]] and lease["start"] > rfc3339(now), lease


def test_a_resume_due_while_a_drain_moves_the_slot_later_waits_for_the_new_slot(app, runtime, sessions, cloud,
                                                                               engine_tick, db_url, monkeypatch):
    """The engine's pass has read that a parked lease's slot has come; a drain of the slot's host
    moves the slot to the other host from later (free now, but booked from within the hour):
    the resume finds the slot later and unshelves nothing (it resumed the lease at once on the
    other host, under the booked lease, outside its slot)."""
    client, lc = app.test_client(), runtime.engine.lifecycle
    lid = client.post("/v1/leases", json=H100_HOST, headers=NLP).get_json()["lease"]["id"]
    engine_tick()
    engine_tick(advance=30)
    assert state(sessions, cloud, lid)["status"] == "active"
    park.begin(lc, lid, "idle for 20 minutes")
    for _ in range(10):
        if state(sessions, cloud, lid)["status"] == "parked":
            break
        engine_tick(advance=30)
    with session_scope(sessions) as s:
        row = s.get_one(m.Lease, lid)
        assert row.status == "parked" and row.resume_by is not None, row.status
        slot_at, host = to_epoch(row.resume_by), row.allocations[0].host
    booked = client.post("/v1/leases", json={**H100_HOST, "start": rfc3339(slot_at + 1800)},
                         headers=VISION).get_json()["lease"]
    assert booked["status"] == "scheduled" and booked["allocations"][0]["host"] != host, booked
    runtime.clock.advance(slot_at - runtime.clock.now())   # the slot has come
    point = Held(lambda out, *args: out == lid)
    real, gate = resume.begin_resume, point.around(lambda lc, lease_id, why: lease_id)

    def held_then_resumed(lc, lease_id: str, why: str) -> None:   # held after the pass read the slot due
        gate(lc, lease_id, why)
        real(lc, lease_id, why)
    monkeypatch.setattr(resume, "begin_resume", held_then_resumed)
    _, drained = race(db_url, point, lambda: resume.tick(lc),
                      lambda: status_code(client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN)))
    assert drained == 200, drained
    with session_scope(sessions) as s:
        row = s.get_one(m.Lease, lid)
        status, resume_by, hosts = row.status, to_epoch(row.resume_by), {a.host for a in row.allocations}
    assert status == "parked" and resume_by > slot_at and host not in hosts, (status, resume_by, hosts)
    assert not [s for s in cloud.lease_servers(lid) if s.status != "SHELVED_OFFLOADED"]


def test_a_planned_lease_a_drain_moved_off_a_down_host_meanwhile_is_not_moved_again(app, runtime, sessions, cloud,
                                                                                  db_url, monkeypatch):
    """The engine's pass has read the leases on a host that went down; an operator's drain of
    that host moves a lease planned there first. The pass finds it no longer there and leaves
    it (it re-placed it once more: sent back to the queue and scheduled again, the owner told
    that "its planned host  went down", no host named)."""
    client, lc = app.test_client(), runtime.engine.lifecycle
    lid = client.post("/v1/leases", json={**H100_HOST, "start": rfc3339(runtime.clock.now() + 3600)},
                      headers=NLP).get_json()["lease"]["id"]
    before = state(sessions, cloud, lid)
    assert before["status"] == "scheduled", before
    down = before["allocations"][0][0]
    cloud.set_host_state(down, up=False)
    lc.refresh_hosts()   # the engine reads the service state; its pass has not moved the lease yet
    point = Held(lambda out, session, hosts: lid in [lease_id for lease_id, _ in out])
    monkeypatch.setattr(host_failure, "leases_on", point.around(host_failure.leases_on))
    _, drained = race(db_url, point, lambda: host_failure.handle_down_hosts(lc),
                      lambda: status_code(client.patch(f"/v1/hosts/{down}", json={"drained": True}, headers=ADMIN)))
    assert drained == 200, drained
    after = state(sessions, cloud, lid)
    assert after["status"] == "scheduled" and down not in [h for h, _ in after["allocations"]], after
    story = client.get(f"/v1/leases/{lid}/events", headers=NLP).get_json()["events"]
    moves = [e["kind"] for e in story if e["kind"] in ("host_drain", "host_failure")]
    requeued = [e for e in story if e["to"] == "queued" and e["from"] == "scheduled"]
    assert moves == ["host_drain"] and len(requeued) == 1, story


def test_a_create_that_waited_for_the_ledger_lock_is_planned_at_the_time_it_got_it(app, runtime, db_url):
    """Another transaction holds the ledger lock while the clock moves on ten minutes: a create
    that waited there meanwhile is planned when it gets the lock. It read the clock before it
    waited, and its lease was scheduled ten minutes in the past (an ETA early by the wait)."""
    client = app.test_client()
    now = runtime.clock.now()
    point, hold = hold_the_ledger_while_time_passes(runtime, 600)
    _, reply = race(db_url, point, hold,
                    lambda: client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=NLP))
    lease = reply.get_json()["lease"]
    assert reply.status_code == 201 and lease["status"] == "scheduled", lease
    assert lease["start"] == rfc3339(now + 600), lease


def hold_the_ledger_while_time_passes(runtime, seconds: int) -> tuple[Held, object]:
    """Another transaction (as an engine's replan) that holds the ledger lock while the clock
    moves on `seconds`, then commits; and the point it is held at."""
    point = Held()
    holding = point.around(lambda: None)

    def hold() -> None:
        with session_scope(runtime.sessions) as session:
            ledger_lock(session)
            holding()
            runtime.clock.advance(seconds)
    return point, hold


def test_a_quota_raised_after_waiting_for_the_ledger_lock_starts_leases_at_the_time_it_got_it(app, runtime,
                                                                                               db_url):
    """A quota raised while a replan holds the ledger lock for ten minutes: the lease it lets
    start starts when the quota's replan runs (it read the clock before it waited, and the lease
    was started ten minutes in the past, short of ten minutes of its time)."""
    client = app.test_client()
    one_host = {"quota": {"gpu_models": {"H100": {"gpus": 4, "borrow_gpus": 0}}}}
    assert client.put("/v1/quotas/nlp-lab", json=one_host, headers=ADMIN).status_code == 200
    now = runtime.clock.now()
    first = client.post("/v1/leases", json=H100_HOST, headers=NLP).get_json()["lease"]
    second = client.post("/v1/leases", json=H100_HOST, headers=NLP).get_json()["lease"]
    assert first["status"] == "scheduled" and second["status"] == "queued", (first, second)
    point, hold = hold_the_ledger_while_time_passes(runtime, 600)
    two_hosts = {"quota": {"gpu_models": {"H100": {"gpus": 8, "borrow_gpus": 0}}}}
    _, raised = race(db_url, point, hold, lambda: status_code(client.put("/v1/quotas/nlp-lab", json=two_hosts,
                                                                          headers=ADMIN)))
    assert raised == 200, raised
    lease = client.get(f"/v1/leases/{second['id']}", headers=NLP).get_json()["lease"]
    assert lease["status"] == "scheduled" and lease["start"] == rfc3339(now + 600), lease
    assert lease["end"] == rfc3339(now + 600 + 7200), lease


def test_a_drain_that_waited_for_the_ledger_lock_moves_leases_from_the_time_it_got_it(app, runtime, sessions,
                                                                                      cloud, db_url):
    """A drain while a replan holds the ledger lock for ten minutes: a lease planned on the host
    from five minutes on is moved to start at the drain (it was moved to start five minutes in
    the past, by the clock read before the wait)."""
    client = app.test_client()
    now = runtime.clock.now()
    lid = client.post("/v1/leases", json={**H100_HOST, "start": rfc3339(now + 300)},
                      headers=NLP).get_json()["lease"]["id"]
    before = state(sessions, cloud, lid)
    assert before["status"] == "scheduled", before
    host = before["allocations"][0][0]
    point, hold = hold_the_ledger_while_time_passes(runtime, 600)
    _, drained = race(db_url, point, hold,
                      lambda: status_code(client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN)))
    assert drained == 200, drained
    lease = client.get(f"/v1/leases/{lid}", headers=NLP).get_json()["lease"]
    assert lease["status"] == "scheduled" and lease["allocations"][0]["host"] != host, lease
    assert lease["start"] == rfc3339(now + 600), lease

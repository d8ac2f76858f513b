"""Requests and the engine acting on one lease, or one budget or host, at the same moment on
PostgreSQL (READ COMMITTED): each check holds until its change commits, so the outcome is one
of the two orders, never a mix, and no two wait for each other in a circle. The locks: a
request's change takes the ledger's, then the lease's (engine/leases.py lock_for_change), a
create for a project with a budget the ledger's before its budget's check, a write of a lease's
name (a create, a rename) the name's before the ledger's (name_lock); an engine step
the lease's, after the ledger's if it plans (engine/events.py lease_in). Each test holds the first side just past its check, lets the
second run until it finishes or waits for a lock, then lets the first go on."""
from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select, update

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch
from gpu_tenancy.domain.states import HOLDING
from gpu_tenancy.engine import budgets, early_ends, events, held, lease_insert, leases, ledger, park
from gpu_tenancy.engine.decision_hook import DecisionHook
from tests.conftest import PG_URL, headers
from tests.races import Held, race

pytestmark = pytest.mark.skipif(not PG_URL, reason="on SQLite every transaction holds the database's write lock "
                                                   "from its start: two always take turns")
NLP = headers("nlp-lab")
ADMIN = headers("ml-vision", "admin", user="ops")
WHOLE_HOST = {"shape": "a100.x8", "duration": "PT2H"}


def status_code(reply) -> int:
    return reply.status_code


def state(sessions, cloud, lease_id: str) -> dict:
    with session_scope(sessions) as s:
        row = s.get(m.Lease, lease_id)
        status, end = row.status, to_epoch(row.end_at) if row.end_at else None
        allocations = [(a.host, to_epoch(a.end_at)) for a in row.allocations]
    vms = [v["host"] for v in cloud.servers().values() if v["lease_id"] == lease_id]
    return {"status": status, "end": end, "allocations": allocations, "vms": vms}


def overbooked(sessions, cloud) -> dict:
    """Hosts whose GPUs booked by holding leases, plus those the cloud's VMs of leases holding none
    take, are more than the host has."""
    with session_scope(sessions) as s:
        sizes = {h.name: h.gpus for h in s.scalars(select(m.Host))}
        rows = s.execute(select(m.Allocation.host, m.Allocation.gpus, m.Allocation.lease_id).join(m.Lease)
                         .where(m.Lease.status.in_([x.value for x in HOLDING]))).all()
    booked: dict[str, int] = defaultdict(int)
    for host, gpus, _ in rows:
        booked[host] += gpus
    holders = {lease_id for _, _, lease_id in rows}
    for server, (host, gpus) in cloud.allocations().items():
        if cloud.servers()[server]["lease_id"] not in holders:
            booked[host] += gpus
    return {h: (n, sizes[h]) for h, n in booked.items() if n > sizes.get(h, 0)}


def borrower_two_hours_in(client, engine_tick) -> str:
    """test_contention.py's story to 10:00: ml-vision runs its quota of A100 and borrows 8 more
    (\"extra\", returned), both for 10 h; nlp-lab's ask for its own quota then reclaims it."""
    vision = headers("ml-vision")
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=vision)
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=vision).get_json()["lease"]["id"]
    engine_tick()
    engine_tick(advance=2 * 3600)
    return extra


def scheduled(client, project_headers=NLP) -> str:
    made = client.post("/v1/leases", json=WHOLE_HOST, headers=project_headers).get_json()["lease"]
    assert made["status"] == "scheduled", made
    return made["id"]


def active(client, sessions, cloud, engine_tick) -> str:
    """A lease of one GPU, run until active."""
    lid = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT2H"}, headers=NLP).get_json()["lease"]["id"]
    for _ in range(20):
        engine_tick(advance=30)
        if state(sessions, cloud, lid)["status"] == "active":
            return lid
    raise AssertionError(f"lease {lid} is {state(sessions, cloud, lid)['status']}, not active")


def test_a_cancel_while_the_engine_starts_the_lease_waits_and_ends_it(app, runtime, sessions, cloud, db_url,
                                                                      monkeypatch):
    """The engine past its check that the lease is scheduled: the cancel waits, then ends the
    lease the engine started (it used to commit `cancelled` and the engine then booted it)."""
    lid = scheduled(app.test_client())
    point = Held(lambda out, session, row, now, floor: row.id == lid)
    monkeypatch.setattr(held, "unreleased_on", point.around(held.unreleased_on))
    _, cancelled = race(db_url, point, lambda: runtime.engine.lifecycle.start(lid),
                        lambda: status_code(app.test_client().delete(f"/v1/leases/{lid}", headers=NLP)))
    after = state(sessions, cloud, lid)
    assert cancelled == 204 and after["status"] in ("ending", "ended"), after
    assert not overbooked(sessions, cloud)


def test_the_engine_start_while_a_cancel_is_past_its_check_finds_the_lease_cancelled(app, runtime, sessions,
                                                                                     cloud, db_url, monkeypatch):
    """The cancel past its check: the engine's start waits, then finds the lease cancelled and
    boots nothing (it used to boot VMs on GPUs the cancel gave back, which later leases got)."""
    lid = scheduled(app.test_client())
    point = Held(lambda out, self, action, view, user_id: view.get("id") == lid)
    monkeypatch.setattr(DecisionHook, "ask", point.around(DecisionHook.ask))
    cancelled, _ = race(db_url, point,
                        lambda: status_code(app.test_client().delete(f"/v1/leases/{lid}", headers=NLP)),
                        lambda: runtime.engine.lifecycle.start(lid))
    after = state(sessions, cloud, lid)
    assert cancelled == 204 and after["status"] == "cancelled" and after["vms"] == [], after
    for project in ("nlp-lab", "ml-vision"):   # the GPUs go to the next leases: no host booked past its size
        assert app.test_client().post("/v1/leases", json=WHOLE_HOST, headers=headers(project)).status_code == 201
    assert not overbooked(sessions, cloud)


def test_many_cancels_at_once_all_succeed(app):
    """Each cancel replans, which moves the other waiting leases: a cancel that wrote its lease
    before taking the ledger lock, while a replan holding it wrote that lease, was a deadlock and
    a 500 (16 of 24 here)."""
    client = app.test_client()
    for _ in range(2):
        scheduled(client)
    answers = []
    for _ in range(3):
        ids = [client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT2H"},
                           headers=NLP).get_json()["lease"]["id"] for _ in range(8)]
        together = threading.Barrier(8, timeout=60)

        def cancel(lease_id: str) -> int:
            together.wait()
            return status_code(app.test_client().delete(f"/v1/leases/{lease_id}", headers=NLP))
        with ThreadPoolExecutor(8) as pool:
            answers += list(pool.map(cancel, ids))
    assert answers == [204] * 24, answers


def test_an_extension_while_the_engine_ends_the_lease_is_refused(app, runtime, sessions, cloud, engine_tick,
                                                                  db_url, monkeypatch):
    """The engine ending the lease (its row read, its end due): the extension waits and is told
    the lease is ending (it used to be written onto the ending lease: 200, and GPU-hours never
    held counted)."""
    lid = active(app.test_client(), sessions, cloud, engine_tick)
    point = Held(lambda out, session, row, now: row.id == lid)
    monkeypatch.setattr(leases, "end_allocations_at", point.around(leases.end_allocations_at))
    monkeypatch.setattr("gpu_tenancy.engine.lifecycle.end_allocations_at", leases.end_allocations_at)
    _, extended = race(db_url, point, lambda: runtime.engine.lifecycle.begin_end(lid, "ended by the engine"),
                       lambda: app.test_client().patch(f"/v1/leases/{lid}", json={"duration": "PT6H"}, headers=NLP))
    after = state(sessions, cloud, lid)
    assert extended.status_code == 409, extended.get_json()
    assert after["status"] in ("ending", "ended") and all(end <= runtime.clock.now() for _, end in after["allocations"])


def test_the_engine_ending_a_lease_whose_end_was_extended_meanwhile_leaves_it_running(app, runtime, sessions, cloud,
                                                                                        engine_tick, db_url,
                                                                                        monkeypatch):
    """The extension past its checks, the engine's end of the lease due by the old end: the end
    waits, reads the new end and leaves the lease running."""
    lid = active(app.test_client(), sessions, cloud, engine_tick)
    old_end = state(sessions, cloud, lid)["end"]
    runtime.clock.advance(old_end - runtime.clock.now())   # its end is due now
    point = Held(lambda out, row, duration, shrink: row.id == lid)
    monkeypatch.setattr(leases, "check_not_shortened", point.around(leases.check_not_shortened))
    extended, _ = race(db_url, point,
                       lambda: app.test_client().patch(f"/v1/leases/{lid}", json={"duration": "PT6H"}, headers=NLP),
                       lambda: runtime.engine.lifecycle.begin_end(lid, "its time is up", old_end))
    after = state(sessions, cloud, lid)
    assert extended.status_code == 200, extended.get_json()
    assert after["status"] == "active" and after["end"] > old_end, after


def test_two_creates_at_once_do_not_both_pass_a_budget_with_room_for_one(app, db_url, monkeypatch):
    client = app.test_client()
    assert client.post("/v1/budgets", json={"budget": {"project_id": "nlp-lab", "gpu_model": "A100",
                                                       "gpu_hours": 20, "period": "month"}},
                       headers=ADMIN).status_code == 201
    point = Held()
    monkeypatch.setattr(budgets, "check", point.around(budgets.check))

    def create() -> int:
        return status_code(app.test_client().post("/v1/leases", json=WHOLE_HOST, headers=NLP))   # 16 GPU-hours
    answers = race(db_url, point, create, create)
    assert sorted(answers) == [201, 403], answers
    current = client.get("/v1/budgets", headers=ADMIN).get_json()["budgets"][0]["current"]
    assert current["used"] + current["planned"] <= 20, current


def test_a_drain_while_a_replan_plans_on_that_host_moves_the_lease_off_it(app, runtime, sessions, db_url, monkeypatch):
    """A replan past its plan, which put a lease on a host: the drain waits for it, then moves
    the lease (it used to answer 200 with the lease left planned on the drained host)."""
    client = app.test_client()
    for _ in range(2):
        scheduled(client)
    lid = client.post("/v1/leases", json=WHOLE_HOST, headers=NLP).get_json()["lease"]
    assert lid["status"] == "queued"
    lid = lid["id"]
    with session_scope(sessions) as s:   # an admin's raise, which the engine's next replan reads
        s.execute(update(m.Quota).where(m.Quota.project_id == "nlp-lab", m.Quota.gpu_model == "A100")
                  .values(gpus=24))
    chosen: list[str] = []

    def planned_here(plan, *args, **kwargs) -> bool:
        place = plan.leases[lid].placement if lid in plan.leases else None
        chosen.extend(place.hosts if place else [])
        return bool(chosen)
    point = Held(planned_here)
    monkeypatch.setattr(ledger, "run_planner", point.around(ledger.run_planner))

    def replan() -> None:
        with session_scope(sessions) as s:
            early_ends.replan(s, runtime.clock, runtime.config, runtime.planner_settings, "engine")

    def drain() -> int:
        return status_code(app.test_client().patch(f"/v1/hosts/{chosen[0]}", json={"drained": True}, headers=ADMIN))
    _, drained = race(db_url, point, replan, drain)
    with session_scope(sessions) as s:
        hosts = list(s.scalars(select(m.Allocation.host).where(m.Allocation.lease_id == lid)))
    assert drained == 200 and chosen and chosen[0] not in hosts, (chosen, hosts)


def test_a_rename_to_the_name_of_a_lease_being_made_waits_and_is_refused(app, runtime, db_url, monkeypatch):
    """A create that fits its lease into the plan writes the lease, name and all, before it takes
    the ledger lock: the create held just past that write, a rename to the same name waits for
    it, then is refused (it took the ledger lock and then waited for the create's name, while the
    create waited for the ledger: PostgreSQL ended one of them as a deadlock, a 500)."""
    runtime.fits.min_waiting = 0   # every create fits its lease into the plan
    client = app.test_client()
    other = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT2H", "name": "other"},
                        headers=NLP).get_json()["lease"]["id"]
    point = Held(lambda out, session, row, *rest: row.name == "train")
    monkeypatch.setattr(lease_insert, "insert_new", point.around(lease_insert.insert_new))
    made, renamed = race(db_url, point,
                         lambda: status_code(app.test_client().post(
                             "/v1/leases", json={"shape": "a100.x1", "duration": "PT2H", "name": "train"},
                             headers=NLP)),
                         lambda: status_code(app.test_client().put(
                             f"/reservation/v1/leases/{other}", json={"name": "train"}, headers=NLP)))
    assert (made, renamed) == (201, 409)



def test_the_engine_ending_a_lease_at_its_notice_while_the_notice_is_called_off_leaves_it_running(
        app, runtime, sessions, cloud, engine_tick, db_url, monkeypatch):
    """A borrower under notice for a waiting lease, which is cancelled just before the notice runs
    out (test_contention.py's story): the cancel's replan past its choice to call the notice off,
    the engine's end of the borrower at the notice waits, then finds it called off and leaves the
    borrower running (it ended it, and the call-off then wrote its old end back over the engine's
    cut: an ending lease holding its GPUs in the ledger for hours, finished as ended)."""
    client = app.test_client()
    extra = borrower_two_hours_in(client, engine_tick)
    train = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                        headers=NLP).get_json()["lease"]["id"]
    engine_tick()   # the notice: the borrower ends at 10:15
    notice = state(sessions, cloud, extra)["end"]
    runtime.clock.advance(notice - 60 - runtime.clock.now())
    point = Held(lambda out, now, hosts, holds, quotas, waiting, usage, lease_id, *rest: lease_id == extra)
    monkeypatch.setattr(early_ends.planner, "extension_conflicts", point.around(early_ends.planner.extension_conflicts))

    def at_the_notice() -> None:
        runtime.clock.advance(60)
        early_ends.end_due(runtime.engine.lifecycle)
    cancelled, _ = race(db_url, point, lambda: status_code(client.delete(f"/v1/leases/{train}", headers=NLP)),
                        at_the_notice)
    after = state(sessions, cloud, extra)
    assert cancelled == 204 and after["status"] == "active" and after["end"] > notice, after
    assert all(end == after["end"] for _, end in after["allocations"]), after


def test_a_warning_of_the_end_while_the_lease_is_extended_leaves_it_to_be_warned_again(
        app, runtime, sessions, cloud, engine_tick, db_url, monkeypatch):
    """The engine past its choice to warn a lease that its end is near: the extension waits, and
    the lease is warned again before its new end (the engine wrote the warning without the lease's
    lock, over the extension, and none came before the new end; writing several leases' warnings
    in one transaction so, against the lock order, it also deadlocked with a request's replan)."""
    lid = active(app.test_client(), sessions, cloud, engine_tick)
    runtime.clock.advance(state(sessions, cloud, lid)["end"] - 1800 - runtime.clock.now())   # within the lead
    point = Held(lambda out, session, row, kind, *rest: row.id == lid and kind == "warning")
    monkeypatch.setattr("gpu_tenancy.engine.lifecycle.record_event", point.around(events.record_event))
    _, extended = race(db_url, point, runtime.engine.lifecycle.warn_due,
                       lambda: app.test_client().patch(f"/v1/leases/{lid}", json={"duration": "PT6H"}, headers=NLP))
    assert extended.status_code == 200, extended.get_json()
    with session_scope(sessions) as s:
        assert s.get(m.Lease, lid).warned_at is None


def test_a_borrower_parked_while_a_replan_reclaims_it_is_not_given_the_notice(
        app, runtime, sessions, cloud, engine_tick, db_url, monkeypatch):
    """A create's replan decides to reclaim a borrower (test_contention.py's story) while the
    engine parks it (idle: active -> parking, under its row lock alone). The replan, past its
    choice, wrote the notice onto the parking lease (its end cut, `preempted` pending), which
    once resumed was ended at once for a lease long started. It now reads the borrower again
    under its lock and, finding it moved on, leaves the reclaim to the next pass."""
    client, vision = app.test_client(), headers("ml-vision")
    extra = borrower_two_hours_in(client, engine_tick)
    assert state(sessions, cloud, extra)["status"] == "active"
    point = Held(lambda out, *args, **kwargs: any(end.lease_id == extra for end in out.ends))
    monkeypatch.setattr(early_ends.reclaim, "early_ends", point.around(early_ends.reclaim.early_ends))
    made, _ = race(db_url, point,
                   lambda: client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                                       headers=NLP).get_json()["lease"],
                   lambda: park.begin(runtime.engine.lifecycle, extra, "idle for 20 minutes"))
    borrower = client.get(f"/v1/leases/{extra}", headers=vision).get_json()["lease"]
    assert borrower["status"] in ("parking", "parked") and borrower["early_end"] is None, borrower
    story = client.get(f"/v1/leases/{extra}/events", headers=vision).get_json()["events"]
    assert not [e for e in story if e["kind"] == "warning"], story
    assert made["status"] == "queued", made
    for _ in range(6):   # parked, its GPUs released: the new lease starts on them
        engine_tick(advance=30)
    assert state(sessions, cloud, made["id"])["status"] in ("provisioning", "active")
    assert not overbooked(sessions, cloud)

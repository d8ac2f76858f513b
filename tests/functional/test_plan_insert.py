"""Creates with a long queue fit their lease into the current plan (engine/plan_insert.py)
instead of replanning every lease: the answer still carries position, ETA and reasons; a
lease last in the planner's order keeps that ETA through the engine's next full replan, one
that goes before others is told its ETA is provisional and the replan moves it no later;
processes that each keep their own copy of the plan never plan two leases onto the same GPUs."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest
from sqlalchemy import event, select

from gpu_tenancy.app import create_app
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.engine import early_ends, offers, plan_insert
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.plan_insert import PlanBook
from tests.conftest import PG_URL, headers
from tests.functional.test_contention import borrower_under_notice
from tests.ledger_checks import peaks
from tests.functional.test_metrics import scrape, value


def fitted(client) -> float:
    return value(scrape(client), "gpu_tenancy_lease_create_replans_total", outcome="fitted")


def fill(client) -> None:
    """The demo cloud's 32 A100, all taken for 2 h, by both projects (so both have used GPUs)."""
    for project in ("ml-vision", "ml-vision", "nlp-lab", "nlp-lab"):
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H"}, headers=headers(project))
        assert reply.get_json()["lease"]["status"] == "scheduled"


def create(client, project: str, shape: str, hours: int) -> dict:
    reply = client.post("/v1/leases", json={"shape": shape, "duration": f"PT{hours}H"}, headers=headers(project))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def replan(runtime) -> None:
    with session_scope(runtime.sessions) as session:
        early_ends.replan(session, runtime.clock, runtime.config, runtime.planner_settings, "planner")


def queue(runtime) -> dict[str, tuple[int | None, int | None]]:
    with session_scope(runtime.sessions) as session:
        return {r.id: (r.queue_position, to_epoch(r.queue_eta))
                for r in session.scalars(select(m.Lease).where(m.Lease.status == "queued"))}


def test_a_fitted_lease_last_in_order_keeps_its_eta_through_the_full_replan(client, runtime):
    runtime.fits.min_waiting = 0
    fill(client)
    before = fitted(client)
    made = [create(client, "ml-vision", shape, hours)
            for shape, hours in (("a100.x8", 3), ("a100.x4", 1), ("a100.x2", 5), ("a100.x1", 2), ("a100.x8", 1))]
    assert fitted(client) == before + len(made)
    for k, lease in enumerate(made):   # one project, asked in turn: each is last in the order
        assert lease["status"] == "queued" and lease["queue"]["position"] == k + 1 and lease["queue"]["eta"]
        assert lease["queue"]["reasons"] and all(r["code"] != "provisional" for r in lease["queue"]["reasons"])
    told = queue(runtime)
    replan(runtime)
    assert queue(runtime) == told   # the full plan is the one the creates fitted


def test_with_the_queued_charge_creates_are_fitted_and_the_full_replan_keeps_their_etas(client, runtime):
    """The charge depends on the leases waiting ahead in the project: a lease asked after them
    changes no other's, so the create still fits it, at its place in the charged order."""
    runtime.planner_settings = replace(runtime.planner_settings, queued_charge=4.0, queued_charge_spares_gpus=8)
    runtime.fits.min_waiting = 0
    fill(client)   # both projects hold 16 GPUs for 2 h: charged alike
    before = fitted(client)
    heavy = [create(client, "ml-vision", "a100.x4", 4) for _ in range(3)]
    light = create(client, "nlp-lab", "a100.x4", 1)
    assert fitted(client) == before + 4
    # each of ml-vision's leases is charged for its own ahead of it: nlp-lab's, with none, goes
    # second (fair share alone would put it last: the same use, asked last)
    assert [lease["queue"]["position"] for lease in heavy] == [1, 2, 3] and light["queue"]["position"] == 2
    assert all(r["code"] != "provisional" for lease in heavy for r in lease["queue"]["reasons"])
    assert "provisional" in [r["code"] for r in light["queue"]["reasons"]]
    told = queue(runtime)
    replan(runtime)
    after = queue(runtime)
    assert [after[lease["id"]][0] for lease in [*heavy, light]] == [1, 3, 4, 2]   # the full plan's charged order
    assert after[light["id"]][1] <= told[light["id"]][1]   # no later
    for lease in heavy[:1]:   # ahead of the light lease: its place and ETA stand
        assert after[lease["id"]] == told[lease["id"]]


def test_a_fitted_lease_that_goes_before_others_is_provisional_and_moves_no_later(client, runtime, clock):
    runtime.fits.min_waiting = 0
    fill(client)
    first = create(client, "ml-vision", "a100.x8", 4)
    with session_scope(runtime.sessions) as session:   # ml-vision has used more: nlp-lab's leases go first
        session.add(m.SpentAllocation(lease_id=first["id"], project_id="ml-vision", host="gpu-a100-01",
                                      gpu_model="A100", gpus=8, start_at=utcnow_naive(clock.now() - 7200),
                                      end_at=utcnow_naive(clock.now() - 600)))
    replan(runtime)
    heavy = [create(client, "ml-vision", "a100.x8", 3) for _ in range(2)]
    light = create(client, "nlp-lab", "a100.x8", 1)
    assert all(r["code"] != "provisional" for lease in heavy for r in lease["queue"]["reasons"])
    codes = [r["code"] for r in light["queue"]["reasons"]]
    assert "provisional" in codes and "fairshare" not in codes and light["queue"]["position"] == 1
    eta = light["queue"]["eta"]
    replan(runtime)
    with session_scope(runtime.sessions) as session:
        row = session.get_one(m.Lease, light["id"])
        assert row.queue_position == 1 and row.queue_eta.strftime("%Y-%m-%dT%H:%M:%SZ") <= eta
        assert all(r["code"] != "provisional" for r in row.queue_reasons)


@pytest.mark.parametrize("charge", [None, 4.0], ids=["fair-share", "queued-charge"])
def test_processes_with_their_own_plan_never_plan_two_leases_on_the_same_gpus(client, runtime, config, clock, cloud,
                                                                             charge):
    runtime.fits.min_waiting = 0
    other = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    other.extensions["gpu_tenancy"].fits.min_waiting = 0
    for rt in (runtime, other.extensions["gpu_tenancy"]):   # (each fits with its own book, charged or not)
        rt.planner_settings = replace(rt.planner_settings, queued_charge=charge, queued_charge_spares_gpus=8)
    clients = [client, other.test_client()]
    fill(client)
    for k in range(12):   # each app fits around what the other fitted meanwhile
        create(clients[k % 2], ["ml-vision", "nlp-lab"][k // 3 % 2], ["a100.x8", "a100.x4", "a100.x2"][k % 3],
               1 + k % 4)
    assert planned_once(runtime) == 12
    assert fitted(client) > 0
    other.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


def planned_once(runtime) -> int:
    """No GPU is held or planned twice at any time, by the ledger and the waiting leases' planned
    hosts together; how many leases wait (each with its hosts)."""
    with session_scope(runtime.sessions) as session:
        rows = list(session.scalars(select(m.Lease).where(m.Lease.status == "queued")))
        hosts = {h.name: h.gpus for h in session.scalars(select(m.Host))}
        allocs = list(session.scalars(select(m.Allocation)))
    assert all(r.planned_hosts for r in rows)
    spans = [(to_epoch(a.start_at), to_epoch(a.end_at), a.host, a.gpus) for a in allocs]
    spans += [(to_epoch(r.start_at), to_epoch(r.end_at), h, r.gpus_per_vm) for r in rows for h in r.planned_hosts]
    for t in {s[0] for s in spans}:
        for host, gpus in hosts.items():
            assert sum(g for a, b, h, g in spans if h == host and a <= t < b) <= gpus, (t, host)
    return len(rows)


@pytest.mark.skipif(not PG_URL, reason="on SQLite a create holds the database's write lock from its start: "
                                       "no other fit commits while it runs")
def test_a_fit_committed_while_a_create_waits_comes_with_its_claim(client, runtime, config, clock, cloud,
                                                                   monkeypatch):
    """The fits committed between a create's look at the plan and its claim of the ledger lock
    come with the claim (plan_insert.Recent), not from a statement of their own, and the create
    plans around them."""
    runtime.fits.min_waiting = 0
    other = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    other.extensions["gpu_tenancy"].fits.min_waiting = 0
    fill(client)
    for k, c in enumerate((client, other.test_client(), client)):   # each process's plan, caught up
        create(c, "ml-vision", "a100.x4", 1 + k)
    real, meanwhile = offers.on_plan, []

    def on_plan(session, now, offer_settings, book, row):   # the lease's offers, before the claim
        if not meanwhile:
            meanwhile.append(None)   # the other process's create has offers too: made once
            # (of another project: one of this project would wait for this create's lock, leases.create_lock)
            meanwhile[0] = create(other.test_client(), "ml-vision", "a100.x8", 3)
        return real(session, now, offer_settings, book, row)
    monkeypatch.setattr(offers, "on_plan", on_plan)
    read: list[str] = []
    engine = runtime.sessions.kw["bind"]

    def seen(conn, cursor, statement, *args):
        read.append(statement)
    event.listen(engine, "before_cursor_execute", seen)
    try:
        before = fitted(client)
        mine = create(client, "nlp-lab", "a100.x8", 2)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    # both fitted (the counter is the process's: both apps')
    assert meanwhile and meanwhile[0]["queue"]["position"] is not None and fitted(client) == before + 2
    assert not [s for s in read if "leases.plan_seq >" in s], "the fits since read from the rows"
    assert mine["queue"]["position"] and planned_once(runtime) == 5   # planned around it
    other.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


def test_a_lease_that_could_start_now_is_planned_by_the_full_replan(client, runtime):
    runtime.fits.min_waiting = 0
    before = fitted(client)
    lease = create(client, "ml-vision", "a100.x1", 1)
    assert lease["status"] == "scheduled" and lease["allocations"]
    assert fitted(client) == before


def test_a_rebuild_after_a_replan_reads_the_plan_as_a_fresh_process_does(client, runtime, config, clock, cloud):
    """A process rebuilds its copy of the plan after every replan, converting only the rows the
    replan changed (the previous build's leases are kept by row): what it builds is what a
    process that never built one reads."""
    runtime.fits.min_waiting = 0
    fill(client)
    made = [create(client, ["ml-vision", "nlp-lab"][k % 2], ["a100.x8", "a100.x4", "a100.x2"][k % 3], 1 + k % 4)
            for k in range(9)]

    def built(cache: plan_insert.InsertCache) -> dict[str, plan_insert.Planned]:
        with session_scope(runtime.sessions) as session:
            generation, inserted = session.execute(plan_insert.COUNTS).one()
            assert plan_insert.build(session, clock.now(), runtime.planner_settings, cache, generation, inserted)
        return {p.request.lease_id: p for p in cache.known.values()}
    warm = plan_insert.InsertCache(min_waiting=0)
    first = built(warm)
    assert set(first) == {lease["id"] for lease in made}
    assert client.delete(f"/v1/leases/{made[0]['id']}", headers=headers("ml-vision")).status_code in (200, 202, 204)
    clock.advance(1800)
    replan(runtime)   # the cancel and the time moved the plan
    again, fresh = built(warm), built(plan_insert.InsertCache(min_waiting=0))
    assert again == fresh and again != first and made[0]["id"] not in again


def test_a_fit_kept_in_the_lock_row_plans_as_its_row_read_from_the_leases(client, runtime):
    """Recent.with_fit keeps a fitted lease by COLUMNS' names: what a claim then takes from the
    lock row is, as a lease of the plan, what reading the row (FITTED_SINCE's columns) gives."""
    runtime.fits.min_waiting = 0
    fill(client)
    made = [create(client, project, shape, hours) for project, shape, hours in
            (("ml-vision", "a100.x8", 3), ("nlp-lab", "a100.x2", 5), ("ml-vision", "a100.x1", 2))]
    with session_scope(runtime.sessions) as session:
        for lease in made:
            row = session.get(m.Lease, lease["id"])
            assert row.plan_seq is not None and row.start_at is not None and row.planned_hosts
            read = session.execute(select(*plan_insert.COLUMNS).where(m.Lease.id == row.id)).one()
            kept = plan_insert.Recent.of(plan_insert.Recent().with_fit(row.plan_seq, row)).since(
                row.plan_seq - 1, row.plan_seq)
            assert kept is not None and len(kept) == 1
            assert plan_insert.planned(kept[0]) == plan_insert.planned(read)
            assert dict(kept[0]) == dict(read._mapping)


def test_a_lease_awaiting_an_announced_reclaim_keeps_creates_from_fitting(client, runtime, clock):
    """A pass that announces a reclaim for later writes the lease's start and clears its hosts
    (early_ends.replan: which GPUs the reclaim frees is not known). A plan with such a lease is
    not fitted into: the fit would count the GPUs its plan gave it as free. The cleared hosts
    were stored as JSON null, which the fit read as a lease placed on no hosts."""
    runtime.fits.min_waiting = 0
    fill(client)
    waiting = create(client, "ml-vision", "a100.x8", 2)
    cache = plan_insert.InsertCache(min_waiting=0)

    def build():
        with session_scope(runtime.sessions) as session:
            generation, inserted = session.execute(plan_insert.COUNTS).one()
            return plan_insert.build(session, clock.now(), runtime.planner_settings, cache, generation, inserted)
    assert build() is not None
    with session_scope(runtime.sessions) as session:   # as early_ends.replan announces a reclaim
        row = session.get_one(m.Lease, waiting["id"])
        row.queue_eta = row.start_at = utcnow_naive(clock.now() + 900)
        row.planned_hosts = None
    with session_scope(runtime.sessions) as session:
        assert session.scalar(select(m.Lease.id).where(m.Lease.planned_hosts.is_(None),
                                                       m.Lease.status == "queued")) == waiting["id"]
    assert build() is None
    runtime.fits.last = None   # its copy of the plan dropped, as the replan that announced it does
    before = fitted(client)
    create(client, "nlp-lab", "a100.x8", 1)
    assert fitted(client) == before   # planned by the full replan


def test_a_fit_with_no_room_after_every_lease_is_planned_by_the_full_replan(client, runtime, monkeypatch):
    """Fitted after every lease, a lease may find no room (one bigger than its project's quota may
    only borrow what is idle from now on): the full replan, where it goes by its order, places it
    (it may start now). It was fitted with no ETA and waited for the engine's next pass."""
    runtime.fits.min_waiting = 0
    fill(client)
    create(client, "ml-vision", "a100.x8", 2)
    real = PlanBook.insert

    def no_room(self, now, lr):
        made = real(self, now, lr)
        return replace(made, planned=replace(made.planned, placement=None))
    monkeypatch.setattr(PlanBook, "insert", no_room)
    before = fitted(client)
    lease = create(client, "nlp-lab", "a100.x8", 1)
    assert fitted(client) == before
    assert lease["queue"]["eta"] is not None   # the full replan's


def plan_calls(monkeypatch) -> list[int]:
    """Counts the full plans made from here on (every replan's planner.plan, reclaims' included)."""
    calls: list[int] = []
    real = planner.plan

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)
    monkeypatch.setattr(planner, "plan", counted)
    return calls


def stored_plan(runtime) -> dict[str, tuple]:
    """Each queued lease's place as the plan stores it: position, ETA, window and hosts."""
    with session_scope(runtime.sessions) as session:
        return {r.id: (r.queue_position, to_epoch(r.queue_eta), to_epoch(r.start_at), to_epoch(r.end_at),
                       r.planned_hosts) for r in session.scalars(select(m.Lease).where(m.Lease.status == "queued"))}


def test_a_cancel_of_a_waiting_lease_in_a_long_queue_takes_it_out_of_the_plan_without_a_full_replan(
        client, runtime, config, clock, cloud, monkeypatch):
    """A cancel replanned every waiting lease under the ledger lock (0.6 s at 10,000 waiting),
    holding every other project's creates: a member's create-then-cancel loop slowed them all.
    With a long queue it now takes its lease out of the stored plan: the others keep their places
    (valid: taking a lease out only frees GPUs), its events, notice and audit record are as before,
    the next create, in this process or another, is fitted around what is left and told its ETA
    is provisional (the plan is no longer the full plan), and the engine's replan moves them."""
    runtime.fits.min_waiting = 3   # the plan holds 4, and 3 once one is cancelled
    fill(client)
    made = [create(client, project, "a100.x8", hours)
            for project, hours in (("ml-vision", 3), ("nlp-lab", 2), ("ml-vision", 1), ("nlp-lab", 4))]
    replan(runtime)
    before, gone = stored_plan(runtime), made[0]["id"]
    calls = plan_calls(monkeypatch)
    assert client.delete(f"/v1/leases/{gone}", headers=headers("ml-vision")).status_code == 204
    assert calls == [], "the cancel planned every waiting lease again"
    after = stored_plan(runtime)
    assert after == {k: v for k, v in before.items() if k != gone}   # the others' places stand
    assert planned_once(runtime) == 3
    shown = client.get(f"/v1/leases/{gone}", headers=headers("ml-vision")).get_json()["lease"]
    assert shown["status"] == "cancelled" and shown["queue"] is None
    events = client.get(f"/v1/leases/{gone}/events", headers=headers("ml-vision")).get_json()["events"]
    assert (events[-1]["to"], events[-1]["message"]) == ("cancelled", "cancelled by the user")
    with session_scope(runtime.sessions) as session:
        assert session.scalar(select(m.AuditRecord.action).where(m.AuditRecord.target_id == gone)
                              .order_by(m.AuditRecord.id.desc()).limit(1)) == "lease.delete"
    other = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    other.extensions["gpu_tenancy"].fits.min_waiting = 3
    for c in (client, other.test_client()):   # its copy caught up, and one built from the rows
        lease = create(c, "nlp-lab", "a100.x4", 1)
        assert lease["queue"]["eta"] and "provisional" in [r["code"] for r in lease["queue"]["reasons"]]
    assert calls == [] and planned_once(runtime) == 5
    monkeypatch.undo()
    replan(runtime)   # the engine's: the lease behind the one cancelled moves up
    assert stored_plan(runtime)[made[1]["id"]][0] == 1
    other.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


def test_a_new_duration_of_a_waiting_lease_in_a_long_queue_is_placed_without_a_full_replan(
        client, runtime, config, clock, cloud, monkeypatch):
    """A PATCH of a waiting lease's duration replanned every waiting lease under the ledger lock
    (0.4 s of CPU at 5,000 waiting): with a long queue, a shorter lease now keeps its place and
    ends earlier, a longer one is placed again around the plan, every other lease keeps its place,
    each is told its place is provisional, and so is the next create, in this process (whose copy
    of the plan learns the new place) and in another that builds its copy from the rows; the
    engine's replan then plans them as a full plan does."""
    runtime.fits.min_waiting = 3
    fill(client)
    made = [create(client, project, "a100.x8", hours)
            for project, hours in (("ml-vision", 3), ("nlp-lab", 2), ("ml-vision", 1), ("nlp-lab", 4))]
    replan(runtime)
    before = stored_plan(runtime)
    calls = plan_calls(monkeypatch)
    short, long = made[1]["id"], made[2]["id"]
    reply = client.patch(f"/v1/leases/{short}", json={"duration": "PT1H", "shrink": True},
                         headers=headers("nlp-lab"))
    assert reply.status_code == 200, reply.get_json()
    assert calls == [], "the shrink planned every waiting lease again"
    after = stored_plan(runtime)
    assert {k: v for k, v in after.items() if k != short} == {k: v for k, v in before.items() if k != short}
    position, eta, start, end, hosts = before[short]
    assert after[short] == (position, eta, start, start + 3600, hosts)   # where it was, ending earlier
    assert "provisional" in [r["code"] for r in reply.get_json()["lease"]["queue"]["reasons"]]
    reply = client.patch(f"/v1/leases/{long}", json={"duration": "PT6H"}, headers=headers("ml-vision"))
    assert reply.status_code == 200, reply.get_json()
    assert calls == [], "the extension planned every waiting lease again"
    after_both = stored_plan(runtime)
    assert {k: v for k, v in after_both.items() if k not in (short, long)} == \
        {k: v for k, v in before.items() if k not in (short, long)}
    assert after_both[long][3] - after_both[long][2] == 6 * 3600
    assert "provisional" in [r["code"] for r in reply.get_json()["lease"]["queue"]["reasons"]]
    assert planned_once(runtime) == 4
    other = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    other.extensions["gpu_tenancy"].fits.min_waiting = 3
    for c in (client, other.test_client()):
        lease = create(c, "nlp-lab", "a100.x4", 1)
        assert lease["queue"]["eta"] and "provisional" in [r["code"] for r in lease["queue"]["reasons"]]
    assert calls == [] and planned_once(runtime) == 6
    monkeypatch.undo()
    replan(runtime)
    with session_scope(runtime.sessions) as session:
        rows = {r.id: r for r in session.scalars(select(m.Lease).where(m.Lease.id.in_([short, long])))}
        assert all("provisional" not in [r["code"] for r in row.queue_reasons] for row in rows.values())
        assert (rows[short].duration, rows[long].duration) == (3600, 6 * 3600)
    other.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


def test_a_copy_built_from_the_rows_is_not_exact_when_a_changed_lease_lands_last_in_the_order(
        client, runtime):
    """A changed lease that is last in its model's order would read, to a copy built from the rows,
    as a fit in order: its provisional reason is what tells that copy the plan is not the full plan."""
    runtime.fits.min_waiting = 3
    fill(client)
    made = [create(client, "ml-vision", "a100.x8", hours) for hours in (3, 2, 1, 4)]
    replan(runtime)
    last = max(stored_plan(runtime).items(), key=lambda kv: kv[1][0])[0]
    assert last == made[-1]["id"]
    reply = client.patch(f"/v1/leases/{last}", json={"duration": "PT2H", "shrink": True},
                         headers=headers("ml-vision"))
    assert reply.status_code == 200
    runtime.fits.last = None   # this process's copy dropped: the next create builds one from the rows
    lease = create(client, "nlp-lab", "a100.x8", 1)
    assert "provisional" in [r["code"] for r in lease["queue"]["reasons"]]


def test_a_copy_of_the_plan_that_kept_a_cancelled_place_fits_around_the_lease_another_process_put_there(
        client, runtime, config, clock, cloud):
    """A process's copy of the plan keeps a cancelled lease's place reserved; another process,
    building its copy from the rows, fits a new lease there. The first copy then holds both on the
    same GPUs (more than the host has, in the copy alone): what it fits next goes elsewhere."""
    runtime.fits.min_waiting = 0
    fill(client)
    for hours in (3, 2):
        create(client, "ml-vision", "a100.x8", hours)
    replan(runtime)
    gone = create(client, "ml-vision", "a100.x8", 2)   # fitted: this process's copy holds it
    place = stored_plan(runtime)[gone["id"]][2:]
    assert client.delete(f"/v1/leases/{gone['id']}", headers=headers("ml-vision")).status_code == 204
    other = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    other.extensions["gpu_tenancy"].fits.min_waiting = 0
    there = create(other.test_client(), "ml-vision", "a100.x8", 2)
    assert stored_plan(runtime)[there["id"]][2:] == place   # the place freed, taken
    assert runtime.fits.last is not None
    kept = runtime.fits.last.book
    for k in range(3):   # this process's copy: the cancelled place and the new lease, both
        create(client, ["nlp-lab", "ml-vision"][k % 2], ["a100.x8", "a100.x4", "a100.x2"][k], 1 + k)
        assert runtime.fits.last is not None and runtime.fits.last.book is kept   # not built again
    assert planned_once(runtime) == 6
    other.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


def test_a_cancel_of_a_lease_a_reclaim_is_for_still_calls_the_notice_off_at_once(client, runtime, engine_tick):
    """The full replan gives a borrower under notice for the cancelled lease its end back: a cancel
    that left it to the engine's next pass could let the notice run out first."""
    runtime.fits.min_waiting = 0
    extra, train = borrower_under_notice(client, engine_tick)
    assert client.delete(f"/v1/leases/{train['id']}", headers=headers("nlp-lab")).status_code == 204
    kept = client.get(f"/v1/leases/{extra['id']}", headers=headers("ml-vision")).get_json()["lease"]
    assert (kept["end"], kept["early_end"]) == ("2026-12-01T18:00:00Z", None)


def quota_overruns(runtime) -> list[str]:
    """Every instant at which a project's allocations and the planned windows of its waiting leases
    (neither borrowing nor preemptible) come to more than its quota and borrowing allow."""
    with session_scope(runtime.sessions) as session:
        limits = {(q.project_id, q.gpu_model): q.gpus + q.borrow_gpus for q in session.scalars(select(m.Quota))}
        spans: dict[tuple[str, str], list] = {}
        for a in session.scalars(select(m.Allocation).join(m.Lease).where(m.Lease.preemptible.is_(False))):
            spans.setdefault((a.project_id, a.gpu_model), []).append((to_epoch(a.start_at), to_epoch(a.end_at), a.gpus))
        for r in session.scalars(select(m.Lease).where(m.Lease.status == "queued", m.Lease.planned_hosts.is_not(None),
                                                       m.Lease.preemptible.is_(False))):
            spans.setdefault((r.project_id, r.gpu_model), []).append(
                (to_epoch(r.start_at), to_epoch(r.end_at), r.gpus_per_vm * r.instances))
    return [f"{key} {held} at {at}" for key, items in spans.items() for at, held in peaks(items, limits.get(key, 0))]


def whole_state(runtime) -> tuple:
    """What a replan decides, for every lease: its state, queue place, window, hosts and reasons,
    and every allocation."""
    with session_scope(runtime.sessions) as session:
        leases = {r.id: (r.status, r.queue_position, to_epoch(r.queue_eta), to_epoch(r.start_at),
                         to_epoch(r.end_at), r.planned_hosts, r.queue_reasons, r.plan_seq)
                  for r in session.scalars(select(m.Lease))}
        allocations = sorted((a.lease_id, a.vm_index, a.host, to_epoch(a.start_at), to_epoch(a.end_at))
                             for a in session.scalars(select(m.Allocation)))
    return leases, allocations


@pytest.mark.parametrize("seed", range(6))
def test_creates_cancels_and_changes_at_random_never_plan_a_gpu_twice_and_the_replan_is_a_fresh_one(
        client, runtime, config, clock, cloud, monkeypatch, seed):
    """Seeded: two processes (each its own copy of the plan) create, cancel and change leases of
    a long queue, the clock moving on, now and then an engine replan. After every step no GPU is
    planned twice and no project beyond its quota at any instant; a cancel of a waiting lease makes
    no full plan and moves no other lease; after the engine's replan the state is what a replan from
    scratch (every queue place forgotten, every copy of the plan dropped) decides."""
    rng = random.Random(seed)
    other = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    apps = [runtime, other.extensions["gpu_tenancy"]]
    for rt in apps:
        rt.fits.min_waiting = 3
    clients = [client, other.test_client()]
    fill(client)
    calls = plan_calls(monkeypatch)
    mine: list[tuple[str, str]] = []   # (lease id, project)
    taken_out = placed_again = changes = 0
    for step in range(30):
        c, project = rng.choice(clients), rng.choice(["ml-vision", "nlp-lab"])
        queued = stored_plan(runtime)
        waiting = [(lid, p) for lid, p in mine if lid in queued]
        kind = rng.choices(["create", "cancel", "change", "replan"], [5, 3, 2, 1])[0] if waiting else "create"
        if kind == "create":
            reply = c.post("/v1/leases", json={"shape": rng.choice(["a100.x8", "a100.x4", "a100.x2", "a100.x1"]),
                                               "duration": f"PT{rng.randint(1, 6)}H"}, headers=headers(project))
            assert reply.status_code in (201, 403), reply.get_json()   # 403: the waiting limits
            if reply.status_code == 201:
                mine.append((reply.get_json()["lease"]["id"], project))
        elif kind == "cancel":
            lease_id, owner = rng.choice(waiting)
            planned = len(calls)
            long_queue = len(queued) >= 3
            assert c.delete(f"/v1/leases/{lease_id}", headers=headers(owner)).status_code == 204
            if long_queue:
                assert len(calls) == planned, f"seed {seed} step {step}: the cancel made a full plan"
                assert stored_plan(runtime) == {k: v for k, v in queued.items() if k != lease_id}
                taken_out += 1
        elif kind == "change":
            lease_id, owner = rng.choice(waiting)
            body = rng.choice([{"duration": f"PT{rng.randint(7, 9)}H", "shrink": True},
                               {"duration": "PT30M", "shrink": True}])
            planned = len(calls)
            changes += len(queued) >= 3
            changed = c.patch(f"/v1/leases/{lease_id}", json=body, headers=headers(owner))
            assert changed.status_code == 200, changed.get_json()
            if len(calls) == planned:   # placed in the plan as it stood: no other lease moved
                assert {k: v for k, v in stored_plan(runtime).items() if k != lease_id} == \
                    {k: v for k, v in queued.items() if k != lease_id}, f"seed {seed} step {step}"
                placed_again += 1
        else:
            replan(runtime)
        planned_once(runtime)
        assert quota_overruns(runtime) == [], f"seed {seed} step {step}"
        clock.advance(rng.choice([0, 0, 30, 120]))
    assert taken_out, f"seed {seed}: no cancel took its lease out"
    assert placed_again or not changes, f"seed {seed}: every change of a long queue replanned in full"
    replan(runtime)   # the engine's
    planned_once(runtime)
    decided = whole_state(runtime)
    with session_scope(runtime.sessions) as session:   # from scratch: no queue place, no copy of the plan
        for row in session.scalars(select(m.Lease).where(m.Lease.status == "queued")):
            row.queue_position = row.queue_eta = row.start_at = row.end_at = row.planned_hosts = None
            row.queue_reasons, row.plan_seq = [], None
    for rt in apps:
        rt.fits.last = None
    replan(runtime)
    assert whole_state(runtime) == decided, f"seed {seed}"
    other.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()

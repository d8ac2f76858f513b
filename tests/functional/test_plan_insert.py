"""Creates with a long queue fit their lease into the current plan (engine/plan_insert.py)
instead of replanning every lease: the answer still carries position, ETA and reasons; a
lease last in the planner's order keeps that ETA through the engine's next full replan, one
that goes before others is told its ETA is provisional and the replan moves it no later;
processes that each keep their own copy of the plan never plan two leases onto the same GPUs."""
from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import event, select

from gpu_tenancy.app import create_app
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.engine import early_ends, offers, plan_insert
from gpu_tenancy.domain.plan_insert import PlanBook
from tests.conftest import PG_URL, headers
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

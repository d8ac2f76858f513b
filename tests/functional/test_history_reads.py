"""The reads on the hot paths cost what the live leases cost, not what the service's history does:
each is read off an index (SQLite's EXPLAIN QUERY PLAN: no SCAN of leases, allocations or
lease_failures, no sort of a project's leases), and reads the same rows as the statement it took
the place of, on a history with finished, running, parked, scheduled, queued and starting leases.
Their speed beside the old statements: bench/history_reads.py (fair share's usage, summed by the
database: bench/fairshare_usage.py)."""
from __future__ import annotations

import dataclasses
import math
import os
import random
import sqlite3
import sys
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, sqlite_math, to_epoch, utcnow_naive
from gpu_tenancy.domain import fairshare
from gpu_tenancy.domain.held import held_until
from gpu_tenancy.domain.model import Hold
from gpu_tenancy.domain.states import FINAL, RESERVING
from gpu_tenancy.engine import early_ends, fairshare_usage, held, host_failure, ledger
from tests.conftest import T0, headers

# the read as it was, kept by the benchmark that sets it beside the new one
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import fairshare_usage as old_fairshare_read  # noqa: E402

H, DAY = 3600, 86400
STATUSES = ("ended", "cancelled", "expired", "failed", "preempted", "active", "parked", "scheduled", "queued",
            "provisioning", "resuming", "ending", "parking")
PROJECTS = ("ml-vision", "nlp-lab")
FRACTIONS = (timedelta(0), timedelta(0), timedelta(microseconds=250_000), timedelta(microseconds=999_999))


def lease_id(k: int) -> str:
    return f"{k:08d}-0000-4000-8000-000000000000"


def add_history(sessions, leases: int, seed: int = 0) -> None:
    """`leases` leases over the 60 days around T0, of every state, most with allocations (some
    ending or starting exactly at the fair-share window's edge or at now), many made in the same
    second (ties of created_at); some reclaimed for another lease, some with failures recorded."""
    rng = random.Random(seed)
    half_life = 7 * DAY
    edges = (T0 - 4 * half_life, T0)   # load_allocations' since and until
    with session_scope(sessions) as session:
        for k in range(leases):
            status = rng.choice(STATUSES)
            project = rng.choice(PROJECTS)
            created = T0 - rng.randrange(0, 60) * DAY + rng.choice([0, 0, 1, 7 * H])   # ties on purpose
            hours = rng.randint(1, 30)
            start = rng.choice([created + rng.randrange(0, 3 * H), edges[0] - rng.randint(0, 2) * H,
                                edges[1] + rng.randint(-2, 2) * H, T0 + rng.randrange(-30, 30) * H])
            end = rng.choice([start + hours * H, *(e for e in edges if e > start)])
            row = m.Lease(id=lease_id(k), name=f"h{k}", project_id=project, user_id="u", status=status,
                          shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=2, duration=end - start,
                          earliest_start=utcnow_naive(start), start_at=utcnow_naive(start), end_at=utcnow_naive(end),
                          arrival=k, preemptible=rng.random() < 0.3, priority=rng.choice([0, 5]), queue_reasons=[],
                          created_at=utcnow_naive(created), updated_at=utcnow_naive(created))
            if status in FINAL and rng.random() < 0.15:
                row.early_end_kind = rng.choice([early_ends.RECLAIMED, early_ends.PREEMPTED])
                row.early_end_for = lease_id(rng.randrange(leases))
                row.early_end_for_project = rng.choice(PROJECTS)
            session.add(row)
            session.flush()   # the lease before the rows that name it
            if status not in ("cancelled", "expired", "queued") or rng.random() < 0.1:
                for vm in range(rng.choice([1, 2])):
                    session.add(m.Allocation(lease_id=row.id, project_id=project, vm_index=vm,
                                             host=f"gpu-a100-0{1 + vm}", gpu_model="A100", gpus=1,
                                             start_at=utcnow_naive(start), end_at=utcnow_naive(end),
                                             borrowing=rng.random() < 0.2))
            if rng.random() < 0.3:
                session.add(m.LeaseFailure(lease_id=row.id, at=utcnow_naive(start), attempt=1,
                                           failure_class="host_down", message="m", hosts=[],
                                           action=rng.choice(["replaced", "retried", "failed"])))


def old_load_allocations(session, now: int, half_life: int, allowance: int = 0, boot_timeout: int | None = None):
    """ledger.load_allocations as it was: one statement, `status IN (...) OR in the window`."""
    holding = {s.value for s in RESERVING}
    since, until = utcnow_naive(now - 4 * half_life), utcnow_naive(now)
    a = m.Allocation
    rows = session.execute(
        select(a.lease_id, a.project_id, a.host, a.gpu_model, a.gpus, a.start_at, a.end_at, a.borrowing,
               m.Lease.status, m.Lease.preemptible, m.Lease.priority, m.Lease.created_at, m.Lease.arrival)
        .join(m.Lease)
        .where(m.Lease.status.in_(holding) | ((a.end_at > since) & (a.start_at < until)))).all()
    deadlines = ledger.starting_deadlines(session, rows, now, boot_timeout)
    holds, records, unreleased = [], [], set()
    for r in rows:
        start, end = to_epoch(r.start_at), to_epoch(r.end_at)
        if r.status in holding:
            if r.status == "ending" or (end <= now and r.status != "scheduled"):
                unreleased.add(r.host)
            held_to = held_until(max(end, deadlines.get(r.lease_id, end)), now, allowance)
            holds.append(Hold(r.lease_id, r.project_id, r.host, r.gpu_model, r.gpus, start,
                              held_to, r.borrowing, r.preemptible, r.priority, allowance,
                              (to_epoch(r.created_at), r.arrival or 0)))
        if r.end_at > since and r.start_at < until:
            records.append((r.project_id, r.gpu_model, r.gpus, start, end))
    gone = held.releasing(session, now, allowance)
    holds += gone
    unreleased.update(h.host for h in gone)
    spent = m.SpentAllocation
    spent_rows = session.execute(select(spent.project_id, spent.gpu_model, spent.gpus, spent.start_at, spent.end_at)
                                 .where(spent.end_at > since))
    records += [(r.project_id, r.gpu_model, r.gpus, to_epoch(r.start_at), to_epoch(r.end_at)) for r in spent_rows]
    return holds, fairshare.decayed_gpu_hours(records, now, half_life), frozenset(unreleased)


def add_moved_and_releasing(sessions) -> None:
    """What else the planner's facts read: a lease's use on a host lost (spent), a VM dropped
    from a re-placed lease still being released, a lease starting past its end (its deadline)."""
    with session_scope(sessions) as session:
        for k, status in ((900, "active"), (901, "provisioning")):
            session.add(m.Lease(id=lease_id(k), name=f"h{k}", project_id="nlp-lab", user_id="u", status=status,
                                shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=1, duration=H,
                                earliest_start=utcnow_naive(T0 - 2 * H), created_at=utcnow_naive(T0 - 2 * H),
                                updated_at=utcnow_naive(T0), queue_reasons=[]))
            session.flush()
            session.add(m.Allocation(lease_id=lease_id(k), project_id="nlp-lab", vm_index=0, host="gpu-a100-03",
                                     gpu_model="A100", gpus=1, start_at=utcnow_naive(T0 - 2 * H),
                                     end_at=utcnow_naive(T0 - H)))
        session.add(m.SpentAllocation(lease_id=lease_id(900), project_id="nlp-lab", host="gpu-a100-04",
                                      gpu_model="A100", gpus=2, start_at=utcnow_naive(T0 - 3 * H),
                                      end_at=utcnow_naive(T0 - 2 * H)))
        session.add(m.ReleasingGpus(lease_id=lease_id(900), vm_index=0, host="gpu-a100-04", gpu_model="A100", gpus=2,
                                    cloud_id="vm-gone",
                                    since=utcnow_naive(T0 - 60)))
        session.add(m.Event(lease_id=lease_id(901), from_state="scheduled", to_state="provisioning",
                            at=utcnow_naive(T0 - 2 * H), actor="engine", kind="transition", message="m"))


def test_the_planners_inputs_are_those_the_one_condition_read(runtime):
    """The planner's holds, usage and unreleased hosts, read by held_allocations and the window's
    read apart, are those the one OR condition over both tables read."""
    add_history(runtime.sessions, 400)
    add_moved_and_releasing(runtime.sessions)
    settings = runtime.planner_settings
    for now in (T0, T0 + 5 * H, T0 + 30 * DAY):
        with runtime.sessions() as session:
            args = (session, now, settings.fairshare_half_life, 30, 600)
            holds, usage, unreleased = ledger.load_allocations(*args)
            old_holds, old_usage, old_unreleased = old_load_allocations(*args)
            kinds = set(session.scalars(select(m.Lease.status)))
        assert sorted(holds, key=repr) == sorted(old_holds, key=repr)
        assert unreleased == old_unreleased
        # the same records summed in another order: the same figures, to the last bits
        assert usage.keys() == old_usage.keys() and all(usage[k] == pytest.approx(old_usage[k], rel=1e-12)
                                                        for k in usage)
        if now == T0:
            assert {h.lease_id.split(" ")[0] for h in holds} >= {lease_id(900), lease_id(901)}
            assert {"ml-vision", "nlp-lab"} <= {p for p, _ in usage} and unreleased
            assert kinds == set(STATUSES)


def python_decayed_usage(session, now: int, half_life: int) -> tuple[dict[tuple[str, str], float], int]:
    """load_allocations' usage as it was (bench/fairshare_usage.py: the window's records fetched,
    converted and summed in Python); and how many records it read."""
    records = old_fairshare_read.window_records(session, now, half_life)
    return fairshare.decayed_gpu_hours(records, now, half_life), len(records)


def add_spent(sessions, leases: int, seed: int) -> None:
    """Spent allocations (use on a host lost) of other models and sizes, across the window's edges
    and now, some at a fraction of a second (to_epoch drops it; so must the database)."""
    rng = random.Random(seed)
    half = timedelta(microseconds=500_000)
    with session_scope(sessions) as session:
        # within a second of now, and of the window's start (its second dropped, it is not after it)
        for start, end in ((utcnow_naive(T0 - H) + FRACTIONS[3], utcnow_naive(T0) + half),
                           (utcnow_naive(T0) - half, utcnow_naive(T0 + H)),
                           (utcnow_naive(T0 - 30 * DAY), utcnow_naive(T0 - 28 * DAY) + half)):
            session.add(m.SpentAllocation(lease_id=lease_id(0), project_id="nlp-lab", host="gpu-h100-01",
                                          gpu_model="H100", gpus=1, start_at=start, end_at=end))
        for _ in range(leases // 4):
            start = T0 + rng.randrange(-40 * DAY, 2 * DAY)
            end = start + rng.choice([1, 59, H, 9 * H, 3 * DAY])
            session.add(m.SpentAllocation(lease_id=lease_id(rng.randrange(leases)), project_id=rng.choice(PROJECTS),
                                          host="gpu-h100-01", gpu_model=rng.choice(["A100", "H100"]),
                                          gpus=rng.choice([1, 2, 8]),
                                          start_at=utcnow_naive(start) + rng.choice(FRACTIONS),
                                          end_at=utcnow_naive(end) + rng.choice(FRACTIONS)))


@pytest.mark.parametrize("seed", [10, 11, 12, 13])
def test_fair_shares_usage_summed_by_the_database_is_pythons(runtime, seed):
    """The decayed usage the database sums (engine/fairshare_usage.py) is fairshare.decayed_gpu_hours
    of the rows it replaced, per key, to float rounding: both add the same terms, only in another
    order, so each within (n - 1) * 2**-53 of the exact sum (n records, every term positive) and
    the two within twice that; and the planner, given either, makes the same plan. Over leases in
    every state, allocations across the window's start and now, spent use, times of day and
    half-lives that move both edges (and none: no decay)."""
    add_history(runtime.sessions, 300, seed=seed)
    add_spent(runtime.sessions, 300, seed)
    rng = random.Random(seed)
    settings = runtime.planner_settings
    keys = set()
    with runtime.sessions() as session:
        for half_life in (settings.fairshare_half_life, DAY, 3 * H + 7, 0):
            for now in (T0, T0 + rng.randrange(-30 * DAY, 3 * DAY), T0 - 4 * half_life + rng.randrange(-H, H)):
                usage = fairshare_usage.decayed_usage(session, now, half_life)
                old, n = python_decayed_usage(session, now, half_life)
                bound = 2 * n * 2.0 ** -53
                assert usage.keys() == old.keys(), (half_life, now)
                assert all(usage[k] == pytest.approx(old[k], rel=bound, abs=0) for k in usage), (usage, old)
                keys |= usage.keys()
        assert keys >= {(p, model) for p in PROJECTS for model in ("A100", "H100")}
        inputs = ledger.load_inputs(session, T0, settings)
        old_inputs = dataclasses.replace(inputs, usage=python_decayed_usage(session, T0, settings.fairshare_half_life)[0])
        plan = ledger.run_planner(inputs, T0, settings)
        assert inputs.waiting and plan.leases == ledger.run_planner(old_inputs, T0, settings).leases


def test_an_sqlite_without_math_functions_is_given_pythons_exp():
    """The usage's SQL calls exp(): an SQLite built without its math functions (before 3.35, or
    without SQLITE_ENABLE_MATH_FUNCTIONS) has none, and gets Python's, the same C exp."""
    class NoMath:
        def __init__(self) -> None:
            self.conn, self.made = sqlite3.connect(":memory:"), {}

        def execute(self, statement: str):
            if "exp(" in statement and "exp" not in self.made:
                raise sqlite3.OperationalError("no such function: exp")
            return self.conn.execute(statement)

        def create_function(self, name, arity, func, deterministic=False) -> None:
            self.made[name] = (arity, func, deterministic)
            self.conn.create_function(name, arity, func, deterministic=deterministic)

    bare = NoMath()
    sqlite_math(bare)
    assert bare.made == {"exp": (1, math.exp, True)}
    assert bare.execute("SELECT exp(-0.5)").fetchone() == (math.exp(-0.5),)
    built = NoMath()
    built.made["exp"] = "its own"   # one with them keeps its own
    sqlite_math(built)
    assert built.made == {"exp": "its own"}


def test_the_yielded_pairs_and_the_moved_leases_are_those_read_before(runtime):
    add_history(runtime.sessions, 400, seed=1)
    final = [s.value for s in FINAL]
    with runtime.sessions() as session:
        beneficiary = m.Lease.__table__.alias("beneficiary")
        old_pairs = frozenset(tuple(r) for r in session.execute(   # yielded_pairs' statement before
            select(m.Lease.project_id, m.Lease.early_end_for_project)
            .join(beneficiary, beneficiary.c.id == m.Lease.early_end_for)
            .where(m.Lease.early_end_kind == early_ends.RECLAIMED, beneficiary.c.status.not_in(final))).all())
        moved = select(m.LeaseFailure.lease_id).where(m.LeaseFailure.action.in_(("replaced", "retried")))
        old_moved = list(session.scalars(   # place_displaced's before
            select(m.Lease.id).where(m.Lease.status == "queued", m.Lease.id.in_(moved))
            .order_by(m.Lease.created_at, m.Lease.arrival, m.Lease.id)))
        assert early_ends.yielded_pairs(session) == old_pairs and old_pairs
        assert [row.id for row in host_failure.displaced(session)] == old_moved and old_moved


def test_a_projects_pages_after_markers_are_its_listing_in_order(client, runtime):
    """Paged through with markers, both ways, a project's listing is each of its leases once, in
    (created_at, id) order, over leases made in the same second (the marker's ties)."""
    add_history(runtime.sessions, 120, seed=2)
    with runtime.sessions() as session:
        listing = list(session.scalars(select(m.Lease.id).where(m.Lease.project_id == "ml-vision")
                                       .order_by(m.Lease.created_at, m.Lease.id)))
    for direction, expected in (("asc", listing), ("desc", listing[::-1])):
        seen: list[str] = []
        marker = ""
        while True:
            reply = client.get(f"/v1/leases?limit=7&sort_dir={direction}{marker}", headers=headers("ml-vision"))
            assert reply.status_code == 200, reply.get_json()
            page = [lease["id"] for lease in reply.get_json()["leases"]]
            if not page:
                break
            seen += page
            marker = f"&marker={page[-1]}"
        assert seen == expected


@contextmanager
def statements() -> Iterator[list[tuple[str, tuple]]]:
    run: list[tuple[str, tuple]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        run.append((statement, parameters))
    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield run
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def plans(db_url: str, run: list[tuple[str, tuple]], table: str) -> list[tuple[str, list[str]]]:
    """Each statement that reads `table`, with its plan."""
    conn = sqlite3.connect(db_url[len("sqlite:///"):])
    out = [(statement, [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, parameters)])
           for statement, parameters in run if f"FROM {table}" in statement or f"JOIN {table}" in statement]
    conn.close()
    return out


def scans(plan: list[str]) -> list[str]:
    """The steps that read a history table whole: a SCAN of it, or of an index of all its rows
    (ix_leases_early_end_for holds only the leases ended early for another)."""
    return [step for step in plan if step.startswith("SCAN") and any(
        f" {t}" in f"{step} " for t in ("leases", "allocations", "lease_failures", "beneficiary"))
        and "ix_leases_early_end_for" not in step]


@pytest.fixture
def sqlite_only(db_url):
    if not db_url.startswith("sqlite"):
        pytest.skip("the plan is SQLite's EXPLAIN QUERY PLAN")


def test_a_replans_reads_of_the_ledger_are_off_indexes(runtime, db_url, sqlite_only):
    """Each replan (and each create that replans), under the ledger lock: the planner's facts,
    the leases reclaimed for live ones, the moved leases to place again. Before, the first read
    every allocation with its lease (SCAN leases), the second every lease, the third every
    failure ever recorded (SCAN lease_failures)."""
    add_history(runtime.sessions, 60, seed=3)
    with statements() as run, runtime.sessions() as session:
        ledger.load_inputs(session, T0, runtime.planner_settings)
        early_ends.yielded_pairs(session)
        host_failure.displaced(session)
    read = [p for table in ("allocations", "leases", "lease_failures") for p in plans(db_url, run, table)]
    assert any("allocations" in s for s, _ in read) and any("lease_failures" in s for s, _ in read)
    for statement, plan in read:
        assert not scans(plan), (statement, plan)


@pytest.mark.parametrize("direction", ["asc", "desc"])
def test_a_page_after_a_marker_starts_at_the_marker_in_the_index(client, runtime, db_url, sqlite_only, direction):
    """GET /v1/leases?marker=: a range of ix_leases_project_created_id from the marker, not the
    project's leases walked, or read after the marker and sorted (a TEMP B-TREE)."""
    add_history(runtime.sessions, 60, seed=4)
    with runtime.sessions() as session:
        marker = session.scalars(select(m.Lease.id).where(m.Lease.project_id == "ml-vision")
                                 .order_by(m.Lease.created_at, m.Lease.id).offset(10).limit(1)).one()
    with statements() as run:
        reply = client.get(f"/v1/leases?limit=5&sort_dir={direction}&marker={marker}", headers=headers("ml-vision"))
    assert reply.status_code == 200 and reply.get_json()["leases"]
    pages = [(s, plan) for s, plan in plans(db_url, run, "leases") if "LIMIT" in s and "ORDER BY" in s]
    assert len(pages) == 1, run
    statement, plan = pages[0]
    assert not any("TEMP B-TREE" in step for step in plan), (statement, plan)
    assert any("ix_leases_project_created_id" in step and "(created_at,id)" in step for step in plan), plan


def old_usage(session, start: int, end: int, now: int, project_id: str | None):
    """usage.gpu_hours and gpu_hours_by_user as they were: the ledger's allocations read as ORM
    objects (capacity.holds_between) and the spent parts, once for each figure, the users apart."""
    from collections import defaultdict

    from gpu_tenancy.domain.calendar import overlap
    from gpu_tenancy.engine.capacity import holds_between
    from gpu_tenancy.engine.usage import USED_GPUS

    def used(start: int, end: int) -> list[Hold]:
        q = select(m.SpentAllocation).where(m.SpentAllocation.start_at < utcnow_naive(end),
                                            m.SpentAllocation.end_at > utcnow_naive(start))
        if project_id is not None:
            q = q.where(m.SpentAllocation.project_id == project_id)
        spent = [Hold(s.lease_id, s.project_id, s.host, s.gpu_model, s.gpus, to_epoch(s.start_at),
                      to_epoch(s.end_at)) for s in session.scalars(q)]
        return holds_between(session, start, end, USED_GPUS, project_id) + spent
    until = min(end, now)
    seconds: dict = defaultdict(lambda: defaultdict(int))
    by_user: dict = defaultdict(int)
    if until > start:
        holds = used(start, until)
        owners = dict(session.execute(select(m.Lease.id, m.Lease.user_id)).all())
        for hold in holds:
            s = hold.gpus * overlap(hold.start, hold.end, start, until)
            seconds[hold.project_id][hold.gpu_model] += s
            by_user[hold.project_id, owners.get(hold.lease_id, ""), hold.gpu_model] += s
    if project_id is not None:
        seconds.setdefault(project_id, defaultdict(int))
    hours = {p: {g: round(s / 3600, 4) for g, s in sorted(models.items())} for p, models in sorted(seconds.items())}
    users: dict = defaultdict(lambda: defaultdict(dict))
    for (p, u, g), s in sorted(by_user.items()):
        users[p][u][g] = round(s / 3600, 4)
    return hours, {p: dict(u) for p, u in users.items()}


def test_usage_is_one_read_of_the_ledger_with_the_figures_of_before(client, runtime):
    """GET /v1/usage read the allocations of its window as ORM objects twice (GPU-hours, then per
    user) and the spent parts twice, then the leases' users: what grows with the history a window
    covers. It is one Core statement of the columns it needs, with the same figures, on a seeded
    history of every state (spent parts of moved leases among them), per project and in all."""
    from gpu_tenancy.engine import usage
    rng = random.Random(7)
    add_history(runtime.sessions, 300, seed=3)
    add_moved_and_releasing(runtime.sessions)
    with session_scope(runtime.sessions) as session:   # the leases asked for by several users
        for row in session.scalars(select(m.Lease)):
            row.user_id = rng.choice(["alice", "bob", "carol"])
    counted = 0
    for _ in range(12):
        start = T0 - rng.randrange(0, 70) * DAY + rng.choice([0, 7 * H])
        end = start + rng.randrange(1, 40) * DAY
        now = T0 + rng.randrange(-10, 10) * DAY
        for project in (None, "ml-vision", "nlp-lab", "no-such"):
            with runtime.sessions() as session:
                figures = usage.figures(session, start, end, now, project)
                assert figures == old_usage(session, start, end, now, project), (start, end, project)
                counted += sum(len(users) for users in figures[1].values())
    assert counted > 30   # the windows held many projects' and users' figures, not only empty ones
    with statements() as run:
        reply = client.get("/v1/usage?all_projects=true&start=2026-10-01T00:00:00Z&end=2026-12-01T08:00:00Z",
                           headers=headers("ops", "admin"))
    assert reply.status_code == 200, reply.get_json()
    assert reply.get_json()["usage"]["projects"]
    reads = [s for s, _ in run if "allocations" in s and s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1, reads

"""The reads on the hot paths that once read every row ever made, on a database with a year of
history: each as it was and as it is, side by side on the same database in one run (ms per read,
median of --repeat, and the ratio), with whether both read the same rows, and each plan with
--plans. Prints figures; asserts nothing.

    python bench/history_reads.py                           # SQLite, 20,000 and 200,000 leases
    python bench/history_reads.py --leases 200000 --pg      # and a throwaway PostgreSQL (initdb needed)

The reads: the planner's allocations (engine/ledger.py: load_allocations, each replan and each
create under the ledger lock: the holds and fair share's window of use), the projects that yielded to another (engine/early_ends.py:
yielded_pairs, each engine pass), the moved leases to place again (engine/host_failure.py:
displaced, each engine pass), and a project's page of leases after a marker, oldest first, its
second page and one halfway down its listing (api/lease_view.py: after; GET /v1/leases?marker=).

History: `leases`, --per-day of them (550: a year's 200,000) on the days before now (30 projects, 1 to 4 VMs, 1 to 24 h each), ended
(some cancelled, expired, failed or preempted) before now, then a few hundred running, parked,
scheduled for later and queued; 1 % of the ended ones reclaimed for another lease (a few for a
lease still running), and 5 % with a failure recorded. Statistics gathered (ANALYZE) as a
deployment's database has them.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import datetime
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))

from sqlalchemy import insert, select, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from gpu_tenancy.api.lease_view import LEASES, PAGE, after  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from gpu_tenancy.db import models as m  # noqa: E402
from gpu_tenancy.db.session import make_engine, to_epoch, utcnow_naive  # noqa: E402
from gpu_tenancy.domain import fairshare  # noqa: E402
from gpu_tenancy.domain.held import held_until  # noqa: E402
from gpu_tenancy.domain.model import Hold  # noqa: E402
from gpu_tenancy.domain.states import FINAL, RESERVING  # noqa: E402
from gpu_tenancy.engine import early_ends, host_failure, ledger  # noqa: E402

NOW = 1_796_112_000
DAY, H = 86400, 3600
HALF_LIFE = 7 * DAY   # config.py: fairshare_half_life_seconds
PROJECTS = 30


def seed(url: str, leases: int, per_day: int, seed_: int = 0) -> None:
    """The history (see the module's doc), written in batches with the schema migrated."""
    rng = random.Random(seed_)
    engine = make_engine(url)
    lease_rows: list[dict] = []
    allocs: list[dict] = []
    failures: list[dict] = []
    live = 600
    for k in range(leases):
        lid = f"{k:08d}-0000-4000-8000-000000000000"
        project = f"p{rng.randrange(PROJECTS):02d}"
        vms, gpus, hours = rng.choice([1, 1, 2, 4]), rng.choice([1, 2, 4, 8]), rng.randint(1, 24)
        if k < leases - live:
            created = NOW - 2 * DAY - (leases - live - k) * DAY // per_day
            start, status = created + rng.randrange(0, 3 * H), rng.choices(
                ["ended", "cancelled", "expired", "failed", "preempted"], [85, 6, 3, 4, 2])[0]
        else:
            j = k - (leases - live)
            created = NOW - 2 * DAY + j * 60
            status = ["active", "parked", "scheduled", "queued", "provisioning", "ending"][j % 6]
            start = {"active": NOW - H, "parked": NOW + 2 * H, "scheduled": NOW + 5 * H,
                     "queued": NOW + 8 * H, "provisioning": NOW - 60, "ending": NOW - hours * H}[status]
        end = start + hours * H
        row: dict[str, Any] = dict(
            id=lid, name=f"l{k}", project_id=project, user_id="u", status=status, shape="a100.x1",
            gpu_model="A100", gpus_per_vm=gpus, instances=vms, duration=hours * H,
            earliest_start=utcnow_naive(created), start_at=utcnow_naive(start), end_at=utcnow_naive(end),
            priority=0, arrival=k, queue_reasons=[], created_at=utcnow_naive(created),
            updated_at=utcnow_naive(min(end, NOW)), early_end_kind=None, early_end_for=None,
            early_end_for_project=None)
        if status == "ended" and rng.random() < 0.01:   # reclaimed for a later lease, mostly over since
            other = min(leases - 1, k + rng.randrange(1, 50)) if rng.random() < 0.98 else leases - live
            row.update(early_end_kind="reclaimed", early_end_for=f"{other:08d}-0000-4000-8000-000000000000",
                       early_end_for_project=f"p{rng.randrange(PROJECTS):02d}")
        lease_rows.append(row)
        if status not in ("cancelled", "expired", "queued"):
            for v in range(vms):
                allocs.append(dict(lease_id=lid, project_id=project, vm_index=v, host=f"h{rng.randrange(200):03d}",
                                   gpu_model="A100", gpus=gpus, start_at=utcnow_naive(start),
                                   end_at=utcnow_naive(end), borrowing=False))
        if rng.random() < 0.05 or (status == "queued" and rng.random() < 0.3):
            failures.append(dict(lease_id=lid, at=utcnow_naive(start), attempt=1, failure_class="host_down",
                                 message="m", hosts=[], action=rng.choice(["replaced", "retried", "failed"])))
    with engine.begin() as conn:
        conn.execute(insert(m.Shape), [dict(
            name="a100.x1", gpu_model="A100", gpus=1, vcpus=8, ram_mb=1024, disk_gb=10, pci_alias="a100",
            created_at=utcnow_naive(NOW - 400 * DAY))])
        for table, rows in ((m.Lease, lease_rows), (m.Allocation, allocs), (m.LeaseFailure, failures)):
            for i in range(0, len(rows), 5000):
                conn.execute(insert(table), rows[i:i + 5000])
        conn.execute(text("ANALYZE"))
    engine.dispose()


# ---- each read as it was (before 0032), and as it is ----

def old_allocations(since: datetime, until: datetime):
    a = m.Allocation
    holding = {s.value for s in RESERVING}
    return (select(a.lease_id, a.project_id, a.host, a.gpu_model, a.gpus, a.start_at, a.end_at, a.borrowing,
                   m.Lease.status, m.Lease.preemptible, m.Lease.priority, m.Lease.created_at, m.Lease.arrival)
            .join(m.Lease).where(m.Lease.status.in_(holding) | ((a.end_at > since) & (a.start_at < until))))


def old_load_allocations(session: Session, now: int, half_life: int) -> tuple:
    """ledger.load_allocations as it was (with no release allowance nor boot timeout)."""
    holding = {s.value for s in RESERVING}
    since, until = utcnow_naive(now - 4 * half_life), utcnow_naive(now)
    holds, records, unreleased = [], [], set()
    for r in session.execute(old_allocations(since, until)).all():
        start, end = to_epoch(r.start_at), to_epoch(r.end_at)
        if r.status in holding:
            if r.status == "ending" or (end <= now and r.status != "scheduled"):
                unreleased.add(r.host)
            holds.append(Hold(r.lease_id, r.project_id, r.host, r.gpu_model, r.gpus, start, held_until(end, now, 0),
                              r.borrowing, r.preemptible, r.priority, 0, (to_epoch(r.created_at), r.arrival or 0)))
        if r.end_at > since and r.start_at < until:
            records.append((r.project_id, r.gpu_model, r.gpus, start, end))
    return holds, fairshare.decayed_gpu_hours(records, now, half_life), frozenset(unreleased)


def same_facts(facts: tuple) -> tuple:
    """The holds in an order of their own, the usage rounded past the last bits of its sums' order."""
    holds, usage, unreleased = facts
    return sorted(holds, key=repr), {k: float(f"{v:.12g}") for k, v in usage.items()}, unreleased


def old_yielded(session: Session) -> frozenset:
    final = [s.value for s in FINAL]
    beneficiary = m.Lease.__table__.alias("beneficiary")
    rows = session.execute(
        select(m.Lease.project_id, m.Lease.early_end_for_project)
        .join(beneficiary, beneficiary.c.id == m.Lease.early_end_for)
        .where(m.Lease.early_end_kind == early_ends.RECLAIMED, beneficiary.c.status.not_in(final)))
    return frozenset((p, other) for p, other in rows if other is not None)


def old_displaced(session: Session) -> list:
    moved = select(m.LeaseFailure.lease_id).where(m.LeaseFailure.action.in_(("replaced", "retried")))
    return list(session.scalars(select(m.Lease).where(m.Lease.status == "queued", m.Lease.id.in_(moved))
                                .order_by(m.Lease.created_at, m.Lease.arrival, m.Lease.id)))


def old_after(mark: Any):
    return (LEASES.created_at > mark.created_at) | ((LEASES.created_at == mark.created_at) & (LEASES.id > mark.id))


def reads(session: Session, new: bool) -> dict[str, tuple]:
    """name -> (the read as it was, or as it is, returning comparable rows; its statements)."""
    since, until = utcnow_naive(NOW - 4 * HALF_LIFE), utcnow_naive(NOW)
    a = m.Allocation   # load_allocations' window of use, read apart
    allocations = [ledger.held_allocations(), select(a.project_id, a.gpu_model, a.gpus, a.start_at, a.end_at)
                   .where(a.end_at > since, a.start_at < until)] if new else [old_allocations(since, until)]
    # the busiest project's second page, oldest first (its 51st lease the marker), and a page
    # halfway down its listing
    project = session.execute(select(LEASES.project_id).group_by(LEASES.project_id)
                              .order_by(text("count(*) DESC"), LEASES.project_id).limit(1)).scalar_one()
    listing = list(session.scalars(select(LEASES.id).where(LEASES.project_id == project)
                                   .order_by(LEASES.created_at, LEASES.id)))
    pages = []
    for marker in (listing[50], listing[len(listing) // 2]):
        mark = session.execute(select(LEASES.created_at, LEASES.id).where(LEASES.id == marker)).one()
        pages.append(PAGE.where(LEASES.project_id == project,
                                after(mark.created_at, mark.id) if new else old_after(mark)).limit(51))
    f = m.LeaseFailure
    moved = ((select(f.id).where(f.lease_id == m.Lease.id, f.action.in_(("replaced", "retried"))).exists())
             if new else m.Lease.id.in_(select(f.lease_id).where(f.action.in_(("replaced", "retried")))))
    displaced = select(m.Lease.id).where(m.Lease.status == "queued", moved)
    beneficiary = m.Lease.__table__.alias("beneficiary")
    yielded = (select(m.Lease.project_id).select_from(beneficiary)
               .join(m.Lease, m.Lease.early_end_for == beneficiary.c.id)
               .where(beneficiary.c.status.in_([s.value for s in early_ends.LeaseState if s not in FINAL]),
                      m.Lease.early_end_kind == "reclaimed")) if new else (
        select(m.Lease.project_id).join(beneficiary, beneficiary.c.id == m.Lease.early_end_for)
        .where(m.Lease.early_end_kind == "reclaimed", beneficiary.c.status.not_in([s.value for s in FINAL])))
    return {
        "planner's allocations": (
            (lambda: same_facts(ledger.load_allocations(session, NOW, HALF_LIFE))) if new
            else (lambda: same_facts(old_load_allocations(session, NOW, HALF_LIFE))), *allocations),
        "yielded pairs": ((lambda: early_ends.yielded_pairs(session)) if new else (lambda: old_yielded(session)),
                          yielded),
        "moved leases to place": ((lambda: [r.id for r in host_failure.displaced(session)]) if new
                                  else (lambda: [r.id for r in old_displaced(session)]), displaced),
        "project's page 2": (lambda: session.execute(pages[0]).all(), pages[0]),
        "a page halfway down": (lambda: session.execute(pages[1]).all(), pages[1]),
    }


def comparable(result: Any) -> Any:
    """Rows in an order of their own (neither statement orders the allocations or the pairs)."""
    return sorted(tuple(r) for r in result) if isinstance(result, list) and result and not isinstance(
        result[0], str) else result


def timed(read: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        read()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def plan_of(session: Session, statement: Any) -> list[str]:
    compiled = statement.compile(dialect=session.get_bind().dialect, compile_kwargs={"render_postcompile": True})
    if session.get_bind().dialect.name == "sqlite":
        return [r[-1] for r in session.connection().exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}",
                                                                   tuple(compiled.params[k] for k in compiled.positiontup or ()))]
    return [r[0] for r in session.connection().exec_driver_sql(f"EXPLAIN {compiled}", compiled.params)]


def measured(url: str, new: bool, repeat: int, plans: bool) -> dict[str, tuple[float, Any, list[str]]]:
    """name -> (ms per read, its rows, its plan), with the code as it was or as it is."""
    engine = make_engine(url)
    out = {}
    with Session(engine) as session:
        for name, (read, *statements) in reads(session, new).items():
            result = comparable(read())
            out[name] = (timed(read, repeat), result,
                         [step for statement in statements for step in plan_of(session, statement)] if plans else [])
    engine.dispose()
    return out


def run(url: str, label: str, leases: int, per_day: int, repeat: int, plans: bool) -> None:
    """Seeded at 0031 (the schema the old reads ran on), read as it was; upgraded to head (its
    indexes built, and ANALYZE again), read as it is."""
    migrate.upgrade(url, "0031_leases_created_index")
    t = time.perf_counter()
    seed(url, leases, per_day)
    print(f"\n{label}, {leases:,} leases, {leases / per_day:.0f} days (seeded in {time.perf_counter() - t:.0f} s)")
    before = measured(url, False, repeat, plans)
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    engine.dispose()
    after_ = measured(url, True, repeat, plans)
    print(f"  {'read':<24}{'as it was':>11}{'as it is':>11}{'ratio':>8}  same rows")
    for name, (was, was_rows, was_plan) in before.items():
        now, now_rows, now_plan = after_[name]
        print(f"  {name:<24}{was:>9.2f}ms{now:>9.2f}ms{was / now:>7.1f}x  {'yes' if was_rows == now_rows else 'NO'}")
        for which, plan in (("was", was_plan), ("is", now_plan)):
            for step in plan:
                print(f"      {which:>3}: {step}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leases", default="20000,200000", help="history sizes, comma-separated")
    ap.add_argument("--per-day", type=int, default=550, help="leases made a day")
    ap.add_argument("--repeat", type=int, default=7, help="reads per figure (the median is printed)")
    ap.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL (bench/throwaway_pg.py)")
    ap.add_argument("--port", type=int, default=0, help="its port (0: one at random above 40000)")
    ap.add_argument("--plans", action="store_true", help="print each read's plan, as it was and as it is")
    args = ap.parse_args(argv)
    import tempfile
    for leases in (int(n) for n in args.leases.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            run(f"sqlite:///{tmp}/history.db", "SQLite", leases, args.per_day, args.repeat, args.plans)
        if args.pg:
            from throwaway_pg import ThrowawayPostgres
            port = args.port or random.randrange(40000, 60000)
            pg = ThrowawayPostgres(port).start()
            try:
                run(pg.url, "PostgreSQL", leases, args.per_day, args.repeat, args.plans)
            finally:
                pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

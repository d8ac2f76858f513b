"""Fair share's decayed usage, read each replan and each create that plans, under the ledger lock:
as it was (fair share's window of allocations fetched, turned into epochs and summed in Python:
fairshare.decayed_gpu_hours) and as it is (summed by the database: engine/fairshare_usage.py),
side by side on the same database in one run (ms per read, median of --repeat, and the ratio),
and the planner's whole read (ledger.load_inputs) with each. Prints figures and how far apart
the two sums are beside the bound engine/fairshare_usage.py states; asserts nothing.

    python bench/fairshare_usage.py                          # SQLite, 20,000 and 200,000 leases
    python bench/fairshare_usage.py --leases 200000 --pg     # and a throwaway PostgreSQL (initdb needed)

History: bench/history_reads.py's (550 leases a day, 30 projects, 1 to 4 VMs each; fair share's
window of four week-long half-lives holds some 27,000 allocations at that rate, whatever the
history's length), at the schema's head, statistics gathered (ANALYZE).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))

from sqlalchemy import func, select, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from history_reads import HALF_LIFE, NOW, seed, timed  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from gpu_tenancy.db import models as m  # noqa: E402
from gpu_tenancy.db.session import make_engine, to_epoch, utcnow_naive  # noqa: E402
from gpu_tenancy.domain import fairshare  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings  # noqa: E402
from gpu_tenancy.engine import fairshare_usage, ledger  # noqa: E402


def python_usage(session: Session, now: int, half_life: int) -> dict[tuple[str, str], float]:
    """ledger.load_allocations' usage as it was: every record of the window fetched."""
    return fairshare.decayed_gpu_hours(window_records(session, now, half_life), now, half_life)


def window_records(session: Session, now: int, half_life: int) -> list[tuple[str, str, int, int, int]]:
    """The allocations and spent allocations of fair share's window, as load_allocations fetched
    and converted them before the database summed them (tests/functional/test_history_reads.py
    compares the two)."""
    since, until = utcnow_naive(now - 4 * half_life), utcnow_naive(now)
    a, spent = m.Allocation, m.SpentAllocation
    records = [(r.project_id, r.gpu_model, r.gpus, to_epoch(r.start_at), to_epoch(r.end_at)) for r in session.execute(
        select(a.project_id, a.gpu_model, a.gpus, a.start_at, a.end_at).where(a.end_at > since, a.start_at < until))]
    spent_rows = session.execute(select(spent.project_id, spent.gpu_model, spent.gpus, spent.start_at, spent.end_at)
                                 .where(spent.end_at > since))
    records += [(r.project_id, r.gpu_model, r.gpus, to_epoch(r.start_at), to_epoch(r.end_at)) for r in spent_rows]
    return records


def run(url: str, label: str, leases: int, per_day: int, repeat: int) -> None:
    migrate.upgrade(url, "0031_leases_created_index")   # the schema history_reads.seed writes
    t = time.perf_counter()
    seed(url, leases, per_day)
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    settings = PlannerSettings(fairshare_half_life=HALF_LIFE)
    with Session(engine) as session:
        since = utcnow_naive(NOW - 4 * HALF_LIFE)
        window = session.scalar(select(func.count()).where(m.Allocation.end_at > since,
                                                           m.Allocation.start_at < utcnow_naive(NOW))) or 0
        print(f"\n{label}, {leases:,} leases, {leases / per_day:.0f} days, {window:,} allocations in fair share's "
              f"window (seeded in {time.perf_counter() - t:.0f} s)")
        was, now_ = python_usage(session, NOW, HALF_LIFE), fairshare_usage.decayed_usage(session, NOW, HALF_LIFE)
        apart = max(abs(now_[k] - was[k]) / was[k] for k in was if was[k]) if was.keys() == now_.keys() else float("nan")
        figures = [("fair share's usage", timed(lambda: python_usage(session, NOW, HALF_LIFE), repeat),
                    timed(lambda: fairshare_usage.decayed_usage(session, NOW, HALF_LIFE), repeat))]
        # the planner's whole read, with the usage as it was in its place
        with mock.patch.object(ledger, "decayed_usage", python_usage):
            load_was = timed(lambda: ledger.load_inputs(session, NOW, settings), repeat)
        figures.append(("planner's inputs", load_was, timed(lambda: ledger.load_inputs(session, NOW, settings), repeat)))
    engine.dispose()
    print(f"  {'read':<22}{'as it was':>11}{'as it is':>11}{'ratio':>8}")
    for name, before, after in figures:
        print(f"  {name:<22}{before:>9.2f}ms{after:>9.2f}ms{before / after:>7.1f}x")
    print(f"  same keys: {'yes' if was.keys() == now_.keys() else 'NO'} ({len(was)}); largest relative difference "
          f"{apart:.2e} (bound: 2 * {window:,} * 2**-53 = {2 * window * 2.0 ** -53:.2e})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leases", default="20000,200000", help="history sizes, comma-separated")
    ap.add_argument("--per-day", type=int, default=550, help="leases made a day")
    ap.add_argument("--repeat", type=int, default=7, help="reads per figure (the median is printed)")
    ap.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL (bench/throwaway_pg.py)")
    ap.add_argument("--port", type=int, default=0, help="its port (0: one at random above 40000)")
    args = ap.parse_args(argv)
    for leases in (int(n) for n in args.leases.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            run(f"sqlite:///{tmp}/history.db", "SQLite", leases, args.per_day, args.repeat)
        if args.pg:
            from throwaway_pg import ThrowawayPostgres
            pg = ThrowawayPostgres(args.port or random.randrange(40000, 60000)).start()
            try:
                run(pg.url, "PostgreSQL", leases, args.per_day, args.repeat)
            finally:
                pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

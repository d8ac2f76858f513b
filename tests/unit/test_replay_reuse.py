"""A decision at jobs' ends reuses the last plan (whatif/planner_sched.py: GpuTenancy._reusable)
only where a plan of now would be the same: every job starts at the same second on the same
hosts, every arrival is told the same ETA and the same wake-ups are asked for as when every
decision plans, with durations asked exactly (where it reuses), over-asked (cancelled at the
real end: more room than planned, never reused) and under-asked (held past their end)."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.planner import PlannerSettings
from tests.unit.test_replay_lazy import SHARES, Wakes, trace

from gpu_tenancy.whatif.event_loop import simulate
from gpu_tenancy.whatif.planner_sched import quota_limits

# (under-asked jobs overrun their holds, and a plan wakes each second of an overrun: few seeds)
SEEDS = {"exact": range(12), "over": range(6), "under": range(2)}


def decide(jobs, hosts: int, reuse: bool, seed: int, mode: str = "open", settings=PlannerSettings()):
    sched = Wakes(quota_limits(SHARES, hosts * 8, mode), insert_min_waiting=8 if seed % 2 else None,
                  reuse=reuse, settings=settings)
    out = simulate(jobs, hosts, sched)
    assert len(out.start) == len(jobs)
    return (out.start, out.hosts, out.first_eta, sched.answers), sched.reused


@pytest.mark.parametrize("asking", ["exact", "over", "under"])
def test_reused_plans_decide_as_plans_made_again(asking):
    reused = 0
    for seed in SEEDS[asking]:
        jobs = trace(random.Random(seed * 11 + len(asking)), asking, n=60 if asking == "under" else 120)
        hosts = 2 + seed % 3
        plain, _ = decide(jobs, hosts, False, seed)
        got, n = decide(jobs, hosts, True, seed)
        assert got == plain, seed
        reused += n
    if asking == "exact":
        assert reused > 100   # most ends come on time: the decisions the reuse saves
    elif asking == "over":
        assert reused == 0    # every job ends before the end it held


def test_no_reuse_where_a_plan_moves_with_time():
    """Quotas that lend (a borrower starts only now) and the wait bound (the order moves with
    the time waited): every decision plans, and decides the same."""
    jobs = trace(random.Random(5), "exact", n=120)
    for mode, settings in (("quota", PlannerSettings()),
                           ("open", PlannerSettings(wait_bound_gpu_hours=1.0, wait_bound_leases=1))):
        plain, _ = decide(jobs, 3, False, 0, mode, settings)
        got, n = decide(jobs, 3, True, 0, mode, settings)
        assert got == plain and n == 0


def test_no_reuse_after_a_start_out_of_the_order():
    """x holds h0 and y and z hold half of h1 until 100 and 50; `a` (6 GPUs) waits for 100 and is
    planned on h0 (both hosts all free then: the name decides); s, after it in the order, starts
    now on h1 and runs past 100. When z ends on time at 50 a plan of now sees s held: h1 is the
    tighter host at 100 and `a` starts there. The plan made at s's start (a on h0) is not reused."""
    from gpu_tenancy.whatif.history import Lease
    jobs = [Lease("x", "a", 0, 100, 8, 1), Lease("y", "a", 0, 100, 4, 1), Lease("z", "a", 0, 50, 1, 1),
            Lease("A", "a", 1, 50, 6, 1), Lease("s", "a", 2, 200, 2, 1)]
    for reuse in (False, True):
        (start, hosts, _etas, _answers), _ = decide(jobs, 2, reuse, 1)   # (1: a plan is kept, for fits)
        assert start["s"] == 2 and hosts["s"] == [1]
        assert start["A"] == 100 and hosts["A"] == [1], reuse

"""The replay's lazy plans (whatif/planner_sched.py with domain/lazy_plan.py) decide as whole
plans do: every job starts at the same second on the same hosts, every arrival is told the
same ETA, and the same wake-ups are asked for, with durations asked exactly, over-asked
(cancelled at the real end) and under-asked (held past their end)."""
from __future__ import annotations

import os
import random
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from gpu_tenancy.whatif.planner_sched import GpuTenancy, quota_limits  # noqa: E402
from traces import Job, shape  # noqa: E402

SHARES = {"a": 0.5, "b": 0.3, "c": 0.2}


def trace(rng: random.Random, asking: str, n: int = 100) -> list[Job]:
    jobs, t = [], 0
    for i in range(n):
        t += rng.randint(0, 30)
        g, vms = shape(rng.choice([1, 1, 1, 2, 4, 8, 16]))
        runtime = rng.randint(60, 1200)
        asked = {"exact": 0, "over": runtime * rng.choice([1, 2, 3]) + rng.randint(0, 600),
                 "under": max(1, runtime - rng.randint(0, 300))}[asking]
        jobs.append(Job(f"j{i}", rng.choice("abc"), t, runtime, g, vms, asked=asked))
    return jobs


class Wakes(GpuTenancy):
    """Records every decision's answer: what starts and the wake-up asked for."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.answers: list[tuple[int, list[str], int | None]] = []

    def schedule(self, now, cluster, running):
        starts, wake = super().schedule(now, cluster, running)
        self.answers.append((now, sorted(j.jid for j, _ in starts), wake))
        return starts, wake


@pytest.mark.parametrize("asking", ["exact", "over", "under"])
@pytest.mark.parametrize("seed", range(4))
def test_lazy_plans_decide_as_whole_plans(seed, asking):
    jobs = trace(random.Random(seed * 7 + len(asking)), asking)
    hosts = 2 + seed % 3
    got = {}
    for lazy in (False, True):
        sched = Wakes(quota_limits(SHARES, hosts * 8, "open"), insert_min_waiting=8 if seed % 2 else None,
                      lazy=lazy, reuse=lazy)   # (whole plans at every decision, against both shortcuts)
        out = simulate(jobs, hosts, sched)
        got[lazy] = (out.start, out.hosts, out.first_eta, sched.answers)
    assert got[True] == got[False]
    assert len(got[True][0]) == len(jobs)

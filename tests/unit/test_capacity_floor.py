"""The single-VM search with its learnt start floors (capacity.StartFloor)
against a scan of every host's profile, on seeded cases that interleave
questions from the origin and later, of many durations, with reservations:
the same start and the same host (least free at the start, then name)."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from planner_scale import NOW as T0, plan_digest, workload  # noqa: E402

from gpu_tenancy.domain import capacity, scan_index  # noqa: E402
from gpu_tenancy.domain.capacity import ModelIndex, StartFloor  # noqa: E402
from gpu_tenancy.domain.model import Host  # noqa: E402
from gpu_tenancy.domain.planner import plan  # noqa: E402
from gpu_tenancy.domain.profile import INF  # noqa: E402

NOW = 1_800_000_000


def scan(mi: ModelIndex, t: int, d: int, g: int):
    """Every host's earliest fit from t, the least (start, free at start, name)."""
    best = None
    for name, hs in mi.hosts.items():
        if hs.gpus < g:
            continue
        s = hs.prof.earliest_fit(t, d, g)
        if s is not None:
            key = (s, min(hs.prof.value_at(s), hs.gpus), name)
            best = key if best is None or key < best else best
    return None if best is None else (best[0], (best[2],))


@pytest.mark.parametrize("chunk", range(8))
def test_search_with_floors_matches_a_scan_of_every_host(chunk, monkeypatch):
    monkeypatch.setattr(capacity, "FLOOR_HOSTS", 1)   # floors on these few hosts too
    learnt = 0
    for seed in range(chunk * 40, chunk * 40 + 40):
        rng = random.Random(seed)
        hosts = [Host(f"h{i:02d}", "A100", rng.choice([2, 4, 8, 8])) for i in range(rng.randint(1, 12))]
        mi = ModelIndex("A100", hosts, NOW)
        for h in hosts:
            for _ in range(rng.randint(0, 4)):
                a = NOW - 600 if rng.random() < .5 else NOW + rng.randint(0, 40) * 300
                mi.apply_hold(h.name, a, a + rng.randint(1, 40) * 300, rng.randint(1, h.gpus))
        mi.build()
        for _ in range(60):
            g = rng.choice([1, 1, 2, 4, 8])
            d = rng.randint(1, 48) * 300 + rng.choice([0, 0, 17])
            t = NOW if rng.random() < .6 else NOW + rng.randint(1, 60) * 300 + rng.choice([0, 0, 29])
            got = mi.earliest(t, d, g)
            assert got == scan(mi, t, d, g), (seed, t, d, g)
            if got is not None and rng.random() < .7:
                mi.reserve(got[1][0], got[0], got[0] + d, g)
        learnt += sum(len(f.ds) for f in mi.floors)
    assert learnt > 100   # the floors were in use

def test_floor_keeps_the_highest_bound_of_the_shorter_durations():
    f = StartFloor()
    assert f.bound(600) == -INF
    f.learn(600, NOW + 100)
    f.learn(1200, NOW + 50)          # covered by the shorter duration's bound: nothing new
    assert (f.ds, f.ss) == ([600], [NOW + 100])
    f.learn(3600, NOW + 500)
    f.learn(1800, NOW + 700)          # rises above 3600's: that entry goes
    assert (f.ds, f.ss) == ([600, 1800], [NOW + 100, NOW + 700])
    f.learn(600, NOW + 200)           # the same duration, later: its bound rises
    assert (f.ds, f.ss) == ([600, 1800], [NOW + 200, NOW + 700])
    assert [f.bound(d) for d in (300, 600, 1799, 1800, 10 ** 6)] == [-INF, NOW + 200, NOW + 200, NOW + 700, NOW + 700]
    f.learn(900, INF)                 # never: nothing longer fits either
    assert f.bound(5000) == INF and f.bound(600) == NOW + 200


@pytest.mark.parametrize("seed", range(6))
def test_plans_with_and_without_floors_are_the_same(seed, monkeypatch):
    """Whole plans (placements, positions, reasons) on the scale benchmark's
    workload, with the floors on and off (on the Python index: the compiled one keeps none)."""
    monkeypatch.setattr(scan_index, "available", False)
    hosts, holds, quotas, waiting, usage = workload(150 + seed * 10, 300 + seed * 50, seed=seed + 1)
    got = {}
    for floors_from in (1, 10 ** 9):
        monkeypatch.setattr(capacity, "FLOOR_HOSTS", floors_from)
        got[floors_from] = plan_digest(plan(T0, hosts, holds, quotas, waiting, usage))
    assert got[1] == got[10 ** 9]

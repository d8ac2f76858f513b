"""The fast planner against the brute-force reference (bench/naive_planner.py)
on a few hundred seeded random small cases, plus invariants checked from raw
intervals: no host over-committed at any instant, no quota passed."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from naive_planner import NAIVE  # noqa: E402

from gpu_tenancy.domain import capacity, scan_index  # noqa: E402
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings, plan  # noqa: E402
from tests.scan_index_built import require_scan_index  # noqa: E402

NOW = 1_800_000_000


def case(seed):
    rng = random.Random(seed)
    hosts = [Host(f"h{i}", "A100" if i % 4 else "V100", rng.choice([4, 8, 8]),
                  enabled=rng.random() > 0.1, aggregate=rng.choice(["a", "b", None]))
             for i in range(rng.randint(1, 6))]
    projects = ["p1", "p2", "p3"]
    holds = []
    for h in hosts:
        used = 0
        for k in range(rng.randint(0, 3)):
            g = rng.randint(1, 4)
            if used + g > h.gpus:
                break
            used += g
            start = NOW - rng.randint(0, 3600) if rng.random() < .7 else NOW + rng.randint(0, 3) * 1800
            holds.append(Hold(f"hold{h.name}{k}", rng.choice(projects), h.name, h.gpu_model, g, start,
                              max(start + 600, NOW + rng.randint(1, 12) * 900), rng.random() < .1))
    quotas = {}
    for p in projects:
        for m in ("A100", "V100"):
            if rng.random() < 0.9:
                quotas[(p, m)] = QuotaLimit(p, m, rng.choice([4, 8, 16, 64]), borrow_gpus=rng.choice([0, 0, 4]),
                                            max_duration=rng.choice([None, None, 4 * 3600]),
                                            weight=rng.choice([1.0, 2.0]))
    waiting = []
    for i in range(rng.randint(1, 14)):
        es = NOW if rng.random() < .7 else NOW + rng.randint(1, 8) * 900
        waiting.append(LeaseRequest(
            f"l{i}", rng.choice(projects), "A100" if rng.random() < .8 else "V100",
            rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 1, 2, 3]), rng.randint(1, 16) * 600 + rng.randint(0, 5),
            es, es + rng.randint(0, 6) * 1800 if rng.random() < .2 else None, NOW - rng.randint(0, 10),
            priority=rng.choice([0, 0, 1])))
    usage = {(p, "A100"): float(rng.randint(0, 3)) for p in projects}
    return hosts, holds, quotas, waiting, usage


@pytest.fixture(params=["levels", "scan", "compiled"])
def fit_path(request, monkeypatch):
    """The three ways a plan's index answers: the compiled scan index (where built), and without
    it the Python index's free levels (from LEVELS_HOSTS hosts) or its read of every host
    (fewer); these cases have few hosts, so the levels are forced."""
    if request.param == "compiled":
        require_scan_index()
        return request.param
    monkeypatch.setattr(scan_index, "available", False)
    if request.param == "levels":
        monkeypatch.setattr(capacity, "LEVELS_HOSTS", 1)
    return request.param


@pytest.mark.parametrize("chunk", range(6))
def test_fast_planner_matches_naive_and_keeps_invariants(chunk, fit_path):
    for seed in range(chunk * 50, chunk * 50 + 50):
        hosts, holds, quotas, waiting, usage = case(seed)
        # every third world with the queued charge (off by default), which reorders the leases, and
        # every third with hosts that empty together (off by default), which chooses other hosts
        settings = (PlannerSettings(queued_charge=4.0, queued_charge_spares_gpus=8) if seed % 3 == 2 else
                    PlannerSettings(empty_together=True) if seed % 3 == 1 else PlannerSettings())
        fast = plan(NOW, hosts, holds, quotas, waiting, usage, settings)
        ref = plan(NOW, hosts, holds, quotas, waiting, usage, settings, _backend=NAIVE)
        assert list(fast.leases) == list(ref.leases)
        for lid, pl in fast.leases.items():
            assert pl.placement == ref.leases[lid].placement, (seed, lid)
            assert pl.borrowing == ref.leases[lid].borrowing, (seed, lid)
        check_invariants(hosts, holds, quotas, waiting, fast)


def check_invariants(hosts, holds, quotas, waiting, p):
    req = {w.lease_id: w for w in waiting}
    host_by = {h.name: h for h in hosts}
    iv = [(max(h.start, NOW), h.end, h.host, h.project_id, h.gpu_model, h.gpus, False)
          for h in holds if h.end > NOW]
    for lid, pl in p.leases.items():
        if pl.placement is None:
            continue
        w = req[lid]
        assert pl.placement.start >= max(NOW, w.earliest_start)
        assert pl.placement.end - pl.placement.start == w.duration
        assert len(pl.placement.hosts) == w.instances
        if w.latest_start is not None:
            assert pl.placement.start <= w.latest_start
        for hn in pl.placement.hosts:
            assert host_by[hn].enabled and host_by[hn].gpu_model == w.gpu_model
            iv.append((pl.placement.start, pl.placement.end, hn, w.project_id, w.gpu_model,
                       w.gpus_per_vm, pl.borrowing))
    points = {s for s, *_ in iv}
    new_iv = iv[len([h for h in holds if h.end > NOW]):]
    for t in points:
        on = [x for x in iv if x[0] <= t < x[1]]
        for hn in {x[2] for x in new_iv if x[0] <= t < x[1]}:
            assert sum(x[5] for x in on if x[2] == hn) <= host_by[hn].gpus, (t, hn)
        for (pr, m) in {(x[3], x[4]) for x in new_iv if x[0] <= t < x[1]}:
            q = quotas[(pr, m)]
            used = sum(x[5] for x in on if x[3] == pr and x[4] == m)
            borrowing_now = any(x[6] for x in new_iv if x[0] <= t < x[1] and x[3] == pr and x[4] == m)
            assert used <= q.gpus + (q.borrow_gpus if borrowing_now else 0), (t, pr, m)


def wide_case(seed):
    """More hosts of mixed sizes (some idle, some over-committed by holds),
    preemptible holds and leases, bigger gangs, future holds."""
    rng = random.Random(seed)
    hosts = [Host(f"h{i:02d}", "A100", rng.choice([1, 2, 4, 8, 8, 8]), enabled=rng.random() > 0.1,
                  aggregate=rng.choice(["a", "b", "c", None])) for i in range(rng.randint(4, 14))]
    projects = ["p1", "p2", "p3", "p4"]
    holds = []
    for h in hosts:
        for k in range(rng.choice([0, 0, 1, 2, 3, 4])):
            start = NOW - rng.randint(0, 3600) if rng.random() < .6 else NOW + rng.randint(0, 12) * 900
            holds.append(Hold(f"hold{h.name}{k}", rng.choice(projects), h.name, "A100",
                              rng.randint(1, h.gpus), start, start + rng.randint(1, 24) * 900 + rng.randint(0, 3),
                              preemptible=rng.random() < .15))
    quotas = {(p, "A100"): QuotaLimit(p, "A100", rng.choice([8, 16, 64, 256]), borrow_gpus=rng.choice([0, 8]),
                                      weight=rng.choice([1.0, 2.0])) for p in projects}
    waiting = []
    for i in range(rng.randint(5, 30)):
        es = NOW if rng.random() < .7 else NOW + rng.randint(1, 16) * 900
        waiting.append(LeaseRequest(
            f"l{i:02d}", rng.choice(projects), "A100", rng.choice([1, 1, 2, 4, 8]),
            rng.choice([1, 1, 1, 2, 3, 4]), rng.randint(1, 32) * 450 + rng.randint(0, 5), es,
            es + rng.randint(0, 8) * 1800 if rng.random() < .15 else None, NOW - rng.randint(0, 100),
            priority=rng.choice([0, 0, 1]), preemptible=rng.random() < .15))
    usage = {(p, "A100"): float(rng.randint(0, 5)) for p in projects}
    return hosts, holds, quotas, waiting, usage


@pytest.mark.parametrize("chunk", range(4))
def test_wider_cases_match_naive_placements_and_reasons(chunk, fit_path):
    for seed in range(10_000 + chunk * 40, 10_000 + chunk * 40 + 40):
        hosts, holds, quotas, waiting, usage = wide_case(seed)
        settings = PlannerSettings(empty_together=seed % 2 == 1)
        fast = plan(NOW, hosts, holds, quotas, waiting, usage, settings)
        ref = plan(NOW, hosts, holds, quotas, waiting, usage, settings, _backend=NAIVE)
        for lid, pl in fast.leases.items():
            assert pl.placement == ref.leases[lid].placement, (seed, lid)
            assert pl.reasons == ref.leases[lid].reasons, (seed, lid)

"""A lazy plan (domain/lazy_plan.py) against plan() on seeded worlds: what it plans for a
decision is the whole plan's, the leases starting now and the leases told an ETA among them,
its next start is the whole plan's, and read to the end it is the whole plan."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpu_tenancy.domain import capacity, scan_index
from gpu_tenancy.domain.lazy_plan import LazyPlan
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.plan_insert import Planned, PlanBook
from gpu_tenancy.domain.planner import PlannerSettings, Planning, plan
from tests.scan_index_built import require_scan_index

NOW = 1_800_000_000
MODELS = ("A100", "H100")


def world(seed: int):
    rng = random.Random(seed)
    hosts = [Host(f"h{i:02d}", rng.choice(MODELS) if rng.random() < .3 else "A100", rng.choice([2, 4, 8, 8]),
                  enabled=rng.random() > .05, aggregate=rng.choice(["a", "b", None]))
             for i in range(rng.randint(1, 10))]
    projects = [f"p{j}" for j in range(rng.randint(1, 5))]
    holds = []
    for h in hosts:
        for k in range(rng.choice([0, 1, 2, 3, 4])):
            start = NOW - rng.randint(0, 7200) if rng.random() < .7 else NOW + rng.randint(0, 16) * 900
            holds.append(Hold(f"hold-{h.name}-{k}", rng.choice(projects), h.name, h.gpu_model,
                              rng.randint(1, h.gpus), start, max(start + 600, NOW + rng.randint(1, 40) * 450),
                              preemptible=rng.random() < .1))
    quotas = {(p, m): QuotaLimit(p, m, rng.choice([4, 8, 16, 64, 512]), borrow_gpus=rng.choice([0, 0, 8]),
                                 max_duration=rng.choice([None, None, 6 * 3600]), weight=rng.choice([1.0, 2.0]))
              for p in projects for m in MODELS if rng.random() < .95}
    waiting = []
    for i in range(rng.randint(0, 60)):
        es = NOW if rng.random() < .8 else NOW + rng.randint(1, 12) * 900
        waiting.append(LeaseRequest(
            f"l{i:03d}", rng.choice(projects), "A100" if rng.random() < .8 else "H100",
            rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 1, 1, 2, 3]),
            rng.randint(1, 48) * 600 + rng.choice([0, 0, 7]), es,
            es + rng.randint(0, 8) * 1800 if rng.random() < .1 else None, NOW - rng.randint(0, 86400),
            priority=rng.choice([0, 0, 0, 1]), preemptible=rng.random() < .05, arrival=i))
    usage = {(p, m): rng.uniform(0, 50) for p in projects for m in MODELS}
    settings = PlannerSettings(wait_bound=rng.choice([None, None, 3600]), release_allowance=rng.choice([0, 0, 120]),
                               age_size_gpu_hours=rng.choice([None, None, 64.0]),
                               queued_charge=rng.choice([None, None, 1.0]), empty_together=rng.random() < 0.3)
    return hosts, holds, quotas, waiting, usage, settings, rng


@pytest.fixture(params=["compiled", "python scan", "python levels and floors"])
def index_kind(request, monkeypatch):
    """The compiled index (where built), and without it both ways the Python index reads few
    hosts and many: these worlds have few, so its free levels and start floors (kept from
    LEVELS_HOSTS and FLOOR_HOSTS hosts) are forced on."""
    if request.param == "compiled":
        require_scan_index()
        return request.param
    monkeypatch.setattr(scan_index, "available", False)
    if request.param == "python levels and floors":
        monkeypatch.setattr(capacity, "LEVELS_HOSTS", 1)
        monkeypatch.setattr(capacity, "FLOOR_HOSTS", 1)
    return request.param


@pytest.mark.parametrize("chunk", range(4))
def test_a_lazy_plan_decides_as_the_whole_plan(chunk, index_kind):
    cut = 0
    for seed in range(chunk * 250, chunk * 250 + 250):
        hosts, holds, quotas, waiting, usage, settings, rng = world(seed)
        explain = rng.random() < .5
        told = {lr.lease_id for lr in waiting if rng.random() < .05}
        full = plan(NOW, hosts, holds, quotas, waiting, usage, settings, explain=explain)
        lazy = LazyPlan(NOW, hosts, holds, quotas, waiting, usage, settings, explain=explain)
        part, next_start = lazy.decide(told)
        for lid, pl in part.leases.items():
            assert pl == full.leases[lid], (seed, lid)
        assert list(part.leases) == list(full.leases)[:len(part.leases)], seed   # a prefix of the order
        starting = {pl.lease_id for pl in full.startable()}
        assert starting <= set(part.leases), (seed, starting - set(part.leases))
        assert told <= set(part.leases), seed
        later = [pl.placement.start for pl in full.leases.values()
                 if pl.placement is not None and pl.placement.start > NOW]
        assert next_start == min(later, default=None), seed
        cut += len(part.leases) < len(full.leases)
        assert lazy.plan.leases == full.leases, seed
        assert list(lazy.plan.leases) == list(full.leases), seed
    assert cut >= 25   # the worlds stop early often enough to test it (about a third do)


def test_a_lazy_plan_refuses_keep_etas():
    with pytest.raises(ValueError):
        LazyPlan(NOW, [], [], {}, [], None, PlannerSettings(keep_etas=True))


@pytest.mark.parametrize("chunk", range(2))
def test_a_book_taken_over_from_a_plan_fits_as_one_rebuilt_from_its_placements(chunk):
    """PlanBook.of_run (the plan's own state once every lease is reserved) against a PlanBook
    rebuilt from the plan's placements: every insertion answers the same, at the plan's now
    and later."""
    compared = 0
    for seed in range(5000 + chunk * 150, 5000 + chunk * 150 + 150):
        hosts, holds, quotas, waiting, usage, settings, rng = world(seed)
        settings = replace(settings, wait_bound=None, age_size_gpu_hours=None)   # (the book takes neither)
        new, old = waiting[:rng.randint(0, 4)], waiting[4:]
        explain = rng.random() < .5
        planning = Planning(NOW, hosts, holds, quotas, old, usage, settings, explain)
        planning.advance()
        planned = [Planned(lr, planning.plan.leases[lr.lease_id].placement,
                           planning.plan.leases[lr.lease_id].borrowing) for lr in old]
        taken = PlanBook.of_run(planning.run, quotas, old, usage, settings, holds)
        rebuilt = PlanBook(NOW, hosts, holds, quotas, planned, usage, settings)
        at = NOW
        for lr in new:
            at += rng.choice([0, 0, 60, 900])
            a, b = taken.insert(at, lr), rebuilt.insert(at, lr)
            assert a.planned.placement == b.planned.placement and a.last == b.last and a.exact == b.exact, seed
            if explain:
                assert a.planned == b.planned, seed
            compared += 1
    assert compared > 100

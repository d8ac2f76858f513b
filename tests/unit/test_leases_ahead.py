"""plan_order.AheadCounter (the leases ahead of each, by kind, that a lease's reasons count)
against their definitions, seeded: with age x size or the queued charge a project's own leases
of a lower score are its own, not "of projects that used less"; with both off, none are."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.plan_order import FAIR, AheadCounter
from gpu_tenancy.domain.planner import Planning, PlannerSettings

H = 3600
NOW = 100 * H


@pytest.mark.parametrize("seed", range(30))
def test_each_lease_ahead_is_counted_once_by_what_puts_it_there(seed):
    rng = random.Random(seed)
    projects = "pqr"
    quotas = {(p, m): QuotaLimit(p, m, 64, weight=rng.choice([0.5, 1.0, 2.0])) for p in projects for m in ("A", "B")}
    usage = {(p, m): float(rng.choice([0, 4, 10, 40])) for p in projects for m in ("A", "B")}
    holds = [Hold(f"h{i}", rng.choice(projects), "h1", "A", rng.randint(1, 4), NOW - H, NOW + rng.randint(1, 9) * H)
             for i in range(rng.randint(0, 3))]
    waiting = [LeaseRequest(f"l{i:02d}", rng.choice(projects), rng.choice("AB"), rng.choice([1, 2, 8]), 1,
                            rng.choice([1, 4]) * H, NOW - rng.randint(0, 8) * H, None, NOW - rng.randint(0, 8) * H,
                            priority=rng.choice([0, 0, 1]), arrival=i) for i in range(rng.randint(1, 25))]
    settings = rng.choice([PlannerSettings(), PlannerSettings(queued_charge=rng.choice([0.5, 4])),
                           PlannerSettings(age_size_gpu_hours=8),
                           PlannerSettings(queued_charge=4, queued_charge_spares_gpus=8, age_size_gpu_hours=8)])
    planning = Planning(NOW, [Host("h1", "A", 8), Host("h2", "B", 8)], holds, quotas, waiting, usage, settings,
                        explain=True)
    counter, seen = AheadCounter(), []
    for lr in planning.ordered:
        score = planning.fair(lr)
        got = counter.next(lr, FAIR, score)
        mine = [(x, s) for x, s in seen if x.gpu_model == lr.gpu_model]
        same = [(x, s) for x, s in mine if x.priority == lr.priority]
        lower = [x for x, s in same if s < score]
        assert got.total == len(mine)
        assert got.priority == len(mine) - len(same)
        assert got.own == sum(x.project_id == lr.project_id for x in lower), seed
        assert got.fairshare == sum(x.project_id != lr.project_id for x in lower), seed
        assert got.order == sum(s == score for _, s in same), seed
        if not settings.aged:
            assert got.own == 0   # fair share alone: a project's leases share its score
        seen.append((lr, score))

"""domain/standing.py (fair-share standing) against the planner itself, and the queue's
short reason: seeded property tests and the figures of small cases."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings, plan
from gpu_tenancy.domain.queue_reasons import ANONYMOUS, PRECEDENCE, anonymous, short_reason
from gpu_tenancy.domain.standing import standing

NOW = 1_800_000_000
HOUR = 3600


@pytest.mark.parametrize("seed", range(40))
def test_the_rank_is_the_order_the_planner_starts_equal_leases_in(seed):
    """Projects with random weights and recent use each ask, at the same instant, for the
    whole of a one-host pool: the planner starts them one after another, in rank order."""
    rng = random.Random(seed)
    projects = [f"p{i}" for i in range(rng.randint(2, 6))]
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 8, weight=rng.choice([0.5, 1.0, 2.0, 3.0]))
              for p in projects}
    usage = {(p, "A100"): float(rng.choice([0, 1, 2, 4, 8, 16])) for p in projects if rng.random() < 0.8}
    waiting = [LeaseRequest(f"lease-{p}", p, "A100", 8, 1, HOUR, NOW, None, NOW, arrival=i)
               for i, p in enumerate(rng.sample(projects, len(projects)))]
    planned = plan(NOW, [Host("h1", "A100", 8)], [], quotas, waiting, usage)
    rank = {row.project_id: row.rank for row in standing(NOW, quotas, [], usage, waiting)}
    starts = [(planned.leases[lr.lease_id].eta, lr.project_id) for lr in waiting]
    assert all(start is not None for start, _ in starts)
    by_start = [p for _, p in sorted(starts)]
    ranks = [rank[p] for p in by_start]
    assert ranks == sorted(ranks)                                          # never a worse rank first
    assert len(set(ranks)) == len({usage.get((p, "A100"), 0.0) / quotas[(p, "A100")].weight for p in projects})
    in_plan_order = [rank[lease_id.removeprefix("lease-")] for lease_id in planned.leases]
    assert in_plan_order == sorted(in_plan_order)                          # and the order it plans them in


@pytest.mark.parametrize("seed", range(40))
def test_with_the_queued_charge_the_rank_is_the_order_the_planner_takes_each_projects_next_lease_in(seed):
    """Projects with random use, holds and waiting leases each ask now for one more lease: the
    planner, charging each for what its project holds from now on and has waiting, orders those
    new leases as the ranks say (fair share alone would not, in some of these worlds)."""
    rng = random.Random(seed)
    projects = [f"p{i}" for i in range(rng.randint(2, 5))]
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 64, weight=rng.choice([0.5, 1.0, 2.0])) for p in projects}
    usage = {(p, "A100"): float(rng.choice([0, 4, 8, 16, 32])) for p in projects}
    holds = [Hold(f"h{i}", rng.choice(projects), "h1", "A100", rng.randint(1, 4), NOW - HOUR,
                  NOW + rng.randint(-1, 6) * HOUR) for i in range(rng.randint(0, 4))]
    waiting = [LeaseRequest(f"w{i}", rng.choice(projects), "A100", rng.choice([1, 2, 8]), 1, rng.choice([1, 4]) * HOUR,
                            NOW - rng.randint(0, 6) * HOUR, None, NOW - rng.randint(0, 6) * HOUR, arrival=i,
                            priority=rng.choice([0, 0, 0, -1])) for i in range(rng.randint(0, 10))]
    charge, spares = rng.choice([0.5, 1.0, 4.0]), rng.choice([None, 8])
    settings = PlannerSettings(queued_charge=charge, queued_charge_spares_gpus=spares)
    rows = {row.project_id: row for row in standing(NOW, quotas, holds, usage, waiting, charge, spares)}
    new = [LeaseRequest(f"new-{p}", p, "A100", 1, 1, HOUR, NOW, None, NOW, arrival=1000 + i)
           for i, p in enumerate(rng.sample(projects, len(projects)))]
    planned = plan(NOW, [Host("h1", "A100", 8)], holds, quotas, [*waiting, *new], usage, settings, explain=False)
    ranks = [rows[lease_id.removeprefix("new-")].rank for lease_id in planned.leases if lease_id.startswith("new-")]
    assert ranks == sorted(ranks), seed
    assert len(set(ranks)) == len({rows[p].score + rows[p].charge for p in projects})
    # the rule off: no charge, ranked by the score alone (as before)
    assert all(row.charge == 0 for row in standing(NOW, quotas, holds, usage, waiting))


def test_the_charge_in_the_standing_is_what_the_planner_charges_a_new_lease():
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16, weight=2.0) for p in "ab"}
    usage = {("a", "A100"): 4.0, ("b", "A100"): 10.0}   # scores 2 and 5: a first, by fair share alone
    holds = [Hold("run", "a", "h1", "A100", 4, NOW - HOUR, NOW + 2 * HOUR)]                # 8 GPU-hours from now
    waiting = [LeaseRequest("w", "a", "A100", 2, 1, 2 * HOUR, NOW - HOUR, None, NOW - HOUR),  # 4 more
               LeaseRequest("big", "a", "A100", 8, 1, HOUR, NOW - HOUR, None, NOW - HOUR)]   # 8 more
    assert [(r.project_id, r.rank, r.charge) for r in standing(NOW, quotas, holds, usage, waiting)] == [
        ("a", 1, 0.0), ("b", 2, 0.0)]
    rows = standing(NOW, quotas, holds, usage, waiting, 0.5)
    assert [(r.project_id, r.rank, r.score, r.charge) for r in rows] == [
        ("b", 1, 5.0, 0.0), ("a", 2, 2.0, 0.5 * (8 + 4 + 8) / 2)]


def test_the_figures_of_one_model():
    quotas = {("a", "A100"): QuotaLimit("a", "A100", 8, borrow_gpus=4, weight=2.0),
              ("b", "A100"): QuotaLimit("b", "A100", 8)}
    holds = [Hold("l1", "a", "h1", "A100", 8, NOW - HOUR, NOW + HOUR),
             Hold("l2", "a", "h2", "A100", 4, NOW - 60, NOW + HOUR, borrowing=True),
             Hold("l3", "b", "h2", "A100", 2, NOW + 60, NOW + HOUR),           # not yet: not in use now
             Hold("l4", "c", "h3", "A100", 2, NOW - 60, NOW + HOUR, preemptible=True)]
    usage = {("a", "A100"): 10.0, ("b", "A100"): 6.0, ("c", "A100"): 0.5}
    waiting = [LeaseRequest("w1", "b", "A100", 1, 1, HOUR, NOW, None, NOW)]
    rows = {r.project_id: r for r in standing(NOW, quotas, holds, usage, waiting)}
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a.nominal, a.borrow_limit, a.in_use, a.borrowed, a.score, a.waiting) == (8, 4, 12, 4, 5.0, 0)
    assert (b.in_use, b.borrowed, b.score, b.waiting) == (0, 0, 6.0, 1)
    # no quota: weighs 1 as in the planner; preemptible GPUs are in use but borrow nothing
    assert (c.nominal, c.weight, c.in_use, c.borrowed, c.score) == (0, 1.0, 2, 0, 0.5)
    assert [(r.project_id, r.rank) for r in standing(NOW, quotas, holds, usage, waiting)] == [
        ("c", 1), ("a", 2), ("b", 3)]


def test_ranks_are_per_model_and_equal_scores_share_one():
    quotas = {(p, m): QuotaLimit(p, m, 4) for p in ("a", "b", "c") for m in ("A100", "H100")}
    usage = {("a", "A100"): 2.0, ("b", "A100"): 2.0, ("c", "A100"): 3.0, ("c", "H100"): 1.0}
    rows = [(r.gpu_model, r.project_id, r.rank) for r in standing(NOW, quotas, [], usage, [])]
    assert rows == [("A100", "a", 1), ("A100", "b", 1), ("A100", "c", 2),
                    ("H100", "a", 1), ("H100", "b", 1), ("H100", "c", 2)]


def test_the_short_reason_is_the_one_that_holds_the_lease_back_most():
    reasons = [{"code": "fairshare", "message": "f"}, {"code": "order", "message": "o"},
               {"code": "capacity", "message": "c"}, {"code": "quota", "message": "q"}]
    assert short_reason(reasons) == {"code": "quota", "message": "q"}
    assert short_reason(reasons[:2]) == {"code": "order", "message": "o"}
    assert short_reason([{"code": "new-code", "message": "n"}, reasons[0]])["code"] == "fairshare"
    assert short_reason([]) is None


def test_every_code_has_words_that_name_no_project():
    assert set(ANONYMOUS) == set(PRECEDENCE)
    assert all("project " not in text.replace("its project", "") for text in ANONYMOUS.values())
    assert anonymous("unknown") == "waiting"


def test_with_the_queued_charge_another_projects_fairshare_reason_says_committed_too():
    assert anonymous("fairshare") == "behind projects that used less recently"   # the rule off: as it was
    assert anonymous("fairshare", charged=True) == "behind projects that used or committed less (the queued charge)"
    assert all(anonymous(code, charged=True) == anonymous(code) for code in ANONYMOUS if code != "fairshare")

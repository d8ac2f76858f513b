"""Incremental planning (domain/plan_insert.py) against the full planner, on 500 seeded cases.

Each case: hosts, holds, quotas, usage and waiting leases (as test_planner_oracle makes
them), their full plan, then one to three new leases fitted into it one after the other.
What "agree" means:

- a new lease last of its GPU model in the planner's order, fitted into an exact plan
  (the full plan, or it with only such leases fitted in): its position, placement
  (start and hosts), borrowing and reasons are what plan() gives it over all the leases,
  and plan() leaves every lease already planned where it was;
- a new lease that goes before some leases of its model: its position is plan()'s, and
  plan() of the exact plan it was fitted into and it starts it no later (it would take
  capacity before the leases behind it do); its answer carries a `provisional` reason,
  as does every lease fitted in once its model's plan is no longer exact, and only those
  (a lease that agrees has plan()'s reasons exactly);
- always: no host holds more GPUs than it has at any instant, no project more than its
  quota (and what it may borrow) at any instant, each lease within its asked window.

Every third case has the queued charge on (domain/queued_charge.py), so the new leases'
places in the order carry their charges as plan() gives them."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unit"))
from test_planner_oracle import NOW, case  # noqa: E402

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit  # noqa: E402
from gpu_tenancy.domain.plan_insert import Planned, PlanBook  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings, plan  # noqa: E402

pytestmark = pytest.mark.long   # minutes: run first (tests/conftest.py)

CASES = 500


def new_lease(rng: random.Random, i: int, projects: list[str]) -> LeaseRequest:
    es = NOW if rng.random() < .7 else NOW + rng.randint(1, 8) * 900
    return LeaseRequest(
        f"new{i}", rng.choice(projects), "A100" if rng.random() < .8 else "V100",
        rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 1, 2, 3]), rng.randint(1, 16) * 600,
        es, es + rng.randint(0, 6) * 1800 if rng.random() < .2 else None,
        NOW + 1 + i,   # asked after every lease waiting
        priority=rng.choice([0, 0, 0, 1]), preemptible=rng.random() < .1, arrival=1000 + i)


def planned_of(full, waiting: list[LeaseRequest]) -> list[Planned]:
    by_id = {lr.lease_id: lr for lr in waiting}
    return [Planned(by_id[lid], pl.placement, pl.borrowing) for lid, pl in full.leases.items()]


@pytest.mark.parametrize("chunk", range(10))
def test_incremental_agrees_with_the_full_plan(chunk):
    per = CASES // 10
    last_seen = first_seen = 0
    for seed in range(chunk * per, chunk * per + per):
        rng = random.Random(10_000 + seed)
        # the queued charge in every third case (with spares in half of those)
        charge = {"queued_charge": rng.choice([1.0, 4.0, 16.0]),
                  "queued_charge_spares_gpus": rng.choice([None, 4, 8])} if seed % 3 == 2 else {}
        # hosts that empty together in every fourth case (off by default: another host choice)
        settings = PlannerSettings(release_allowance=rng.choice([0, 0, 60]), empty_together=seed % 4 == 1, **charge)
        hosts, holds, quotas, waiting, usage = case(seed)
        full = plan(NOW, hosts, holds, quotas, waiting, usage, settings)
        book = PlanBook(NOW, hosts, holds, quotas, planned_of(full, waiting), usage, settings)
        everyone = list(waiting)
        known = {lid: pl.placement for lid, pl in full.leases.items()}   # where the book has each lease
        model = {lr.lease_id: lr.gpu_model for lr in waiting}
        fitted: dict[str, Planned] = {}
        for i in range(rng.randint(1, 3)):
            lr = new_lease(rng, i, ["p1", "p2", "p3"])
            was_exact = book.exact[lr.gpu_model]
            got = book.insert(NOW, lr)
            ref = plan(NOW, hosts, holds, quotas, [*everyone, lr], usage, settings)
            mine = ref.leases[lr.lease_id]
            assert got.planned.position == mine.position, seed
            if got.last and was_exact:
                last_seen += 1
                assert got.exact
                assert got.planned.placement == mine.placement, seed
                assert got.planned.borrowing == mine.borrowing, seed
                assert got.planned.reasons == mine.reasons, seed   # so no `provisional` one
                for lid, placement in known.items():
                    if model[lid] == lr.gpu_model:
                        assert ref.leases[lid].placement == placement, (seed, lid)
            else:
                assert not got.exact
                assert any(r.code == "provisional" for r in got.planned.reasons)
                if not got.last and was_exact and got.planned.placement is not None:
                    first_seen += 1
                    assert mine.placement is not None and mine.placement.start <= got.planned.placement.start, seed
            fitted[lr.lease_id] = Planned(lr, got.planned.placement, got.planned.borrowing)
            everyone.append(lr)
            known[lr.lease_id], model[lr.lease_id] = got.planned.placement, lr.gpu_model
        check_invariants(hosts, holds, quotas, waiting, full, fitted)
    # the cases cover both sides
    assert last_seen > per // 4 and first_seen > 0


def check_invariants(hosts: list[Host], holds: list[Hold], quotas: dict[tuple[str, str], QuotaLimit],
                     waiting: list[LeaseRequest], full, fitted: dict[str, Planned]) -> None:
    """Holds, the full plan's placements and the fitted leases together: no host and no project past
    its GPUs at any instant (a project's holds may already be; then nothing of its own may add to it)."""
    spans = [(max(h.start, NOW), h.end, h.host, h.project_id, h.gpu_model, h.gpus, h.preemptible, False)
             for h in holds if h.end > NOW]
    by_id = {lr.lease_id: lr for lr in waiting}
    placed = [Planned(by_id[lid], pl.placement, pl.borrowing) for lid, pl in full.leases.items()]
    for p in [*placed, *fitted.values()]:
        if p.placement is None:
            continue
        lr = p.request
        assert p.placement.start >= max(NOW, lr.earliest_start)
        assert lr.latest_start is None or p.placement.start <= lr.latest_start
        mine = p.request.lease_id in fitted
        for host in p.placement.hosts:
            spans.append((p.placement.start, p.placement.end, host, lr.project_id, lr.gpu_model, lr.gpus_per_vm,
                          lr.preemptible, mine))
    capacity = {h.name: h.gpus for h in hosts}
    for t in sorted({s[0] for s in spans}):
        on_host: dict[str, int] = {}
        by_project: dict[tuple[str, str], int] = {}
        of_fitted: set[tuple[str, str]] = set()
        for start, end, host, project, model, gpus, preemptible, mine in spans:
            if start <= t < end:
                on_host[host] = on_host.get(host, 0) + gpus
                if not preemptible:
                    by_project[(project, model)] = by_project.get((project, model), 0) + gpus
                    if mine:
                        of_fitted.add((project, model))
        for host, used in on_host.items():
            assert used <= capacity[host], (t, host)
        for key in of_fitted:
            q = quotas[key]
            assert by_project[key] <= q.gpus + q.borrow_gpus, (t, key)

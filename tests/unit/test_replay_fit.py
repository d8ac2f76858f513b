"""The replay tells an arriving lease the ETA the service's create would (a fit into the
plan, domain/plan_insert.py, once insert_min_waiting leases are planned; a full plan
below that), and fitting changes no start (whatif/planner_sched.py)."""
from __future__ import annotations

import os
import random
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from gpu_tenancy.domain.model import Hold, Host  # noqa: E402
from gpu_tenancy.domain.plan_insert import Planned, PlanBook  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings, plan  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from gpu_tenancy.whatif.planner_sched import MODEL, GpuTenancy, quota_limits  # noqa: E402
from traces import Job, shape  # noqa: E402

SHARES = {"a": 0.5, "b": 0.3, "c": 0.2}
HOSTS = 2
# the default's order, and the queued charge's (its order moves with the holds' time left)
SETTINGS = {"default": PlannerSettings(), "charged": PlannerSettings(queued_charge=4.0, queued_charge_spares_gpus=8)}


def busy_trace(rng: random.Random, n: int = 120) -> list[Job]:
    """More work than two hosts take, so that dozens wait; arrivals one second apart at least
    (the engine replans between creates of different seconds)."""
    jobs, t = [], 0
    for i in range(n):
        t += rng.randint(1, 40)
        g, vms = shape(rng.choice([1, 1, 2, 4, 8, 16]))
        jobs.append(Job(f"j{i}", rng.choice("abc"), t, rng.randint(60, 900), g, vms))
    return jobs


class CreateReference(GpuTenancy):
    """Records, before each arrival's decision, the ETA the service's create answers: the
    engine's full plan of the leases waiting before it with the new one fitted in (a full
    plan with it instead below insert_min_waiting, or when the fit would start it now or finds
    no room for it)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.expected: dict[str, int | None] = {}

    def schedule(self, now, cluster, running):
        if len(self.unplanned) == 1:
            jid = next(iter(self.unplanned))
            hosts = [Host(n, MODEL, cluster.host_gpus) for n in cluster.names]
            holds = [Hold(j.jid, j.tenant, cluster.names[h], MODEL, j.gpus_per_vm, st,
                          max(st + j.duration, now + 1)) for j, hs, st in running.values() for h in hs]
            usage = self.usage(now, running)
            old = [self.requests[k] for k in self.waiting if k != jid]
            new = self.requests[jid]
            eta = None
            if len(old) >= (self.insert_min_waiting or 0):
                p0 = plan(now, hosts, holds, self.quotas, old, usage, self.settings, explain=False)
                book = PlanBook(now, hosts, holds, self.quotas,
                                [Planned(lr, p0.leases[lr.lease_id].placement) for lr in old], usage, self.settings)
                place = book.insert(now, new).planned.placement
                eta = place.start if place is not None else None
                full = place is None or place.start <= now   # (no room after every lease: planned in full)
            if len(old) < (self.insert_min_waiting or 0) or full:
                eta = plan(now, hosts, holds, self.quotas, [*old, new], usage, self.settings,
                           explain=False).leases[jid].eta
            self.expected[jid] = eta
        return super().schedule(now, cluster, running)


@pytest.mark.parametrize("order", SETTINGS)
@pytest.mark.parametrize("seed", range(5))
def test_each_arrival_is_told_the_eta_the_services_create_would_tell(seed, order):
    jobs = busy_trace(random.Random(seed))
    ref = CreateReference(quota_limits(SHARES, HOSTS * 8, "open"), insert_min_waiting=8, settings=SETTINGS[order])
    out = simulate(jobs, HOSTS, ref)
    assert out.first_eta is not None
    told = {jid: eta for jid, eta in ref.expected.items() if eta is not None}
    assert {jid: out.first_eta.get(jid) for jid in told} == told
    assert ref.inserted > 10   # the fit path was taken, not only the full plan
    # and it matters: some arrivals are told a later ETA than a full plan with them would give
    full = GpuTenancy(quota_limits(SHARES, HOSTS * 8, "open"), insert_min_waiting=None, settings=SETTINGS[order])
    by_plan = simulate(jobs, HOSTS, full).first_eta
    assert by_plan is not None
    assert any(by_plan.get(j) != out.first_eta.get(j) for j in told)


@pytest.mark.parametrize("order", SETTINGS)
@pytest.mark.parametrize("seed", range(5))
def test_fitting_arrivals_changes_no_start(seed, order):
    """The fit only tells (or, where it is provably the full plan, stands in for it):
    every job starts when and where it did with a full plan at every decision."""
    jobs = busy_trace(random.Random(100 + seed))
    runs = []
    for min_waiting in (None, 0, 8):
        sched = GpuTenancy(quota_limits(SHARES, HOSTS * 8, "open"), insert_min_waiting=min_waiting,
                           settings=SETTINGS[order])
        out = simulate(jobs, HOSTS, sched)
        runs.append((out.start, out.hosts, sched.stats()))
    assert runs[0][:2] == runs[1][:2] == runs[2][:2]
    assert runs[1][2]["etas_fitted"] > 0 and runs[0][2]["etas_fitted"] == 0
    # with every arrival fitted, the fits that stood for a full plan saved plans
    assert runs[1][2]["plans"] <= runs[0][2]["plans"]


def test_the_loop_tells_whether_another_arrival_comes_at_the_same_instant():
    """The service's creates of one instant are fitted one after another with no pass between
    (engine/plan_insert.py): the replay's scheduler is told which arrival is not the last."""
    seen: list[tuple[str, int, bool]] = []

    class Recording(GpuTenancy):
        def schedule(self, now, cluster, running):
            seen.append((",".join(sorted(self.unplanned)), now, self.arrivals_follow))
            return super().schedule(now, cluster, running)
    jobs = [Job("a1", "a", 10, 600, 8, 1), Job("a2", "b", 10, 600, 8, 1), Job("a3", "c", 10, 600, 8, 1),
            Job("b1", "a", 20, 600, 8, 1)]
    simulate(jobs, HOSTS, Recording(quota_limits(SHARES, HOSTS * 8, "open")))
    assert [(u, t, f) for u, t, f in seen if u] == [("a1", 10, True), ("a2", 10, True), ("a3", 10, False),
                                                    ("b1", 20, False)]
    assert not any(f for u, _t, f in seen if not u)   # an end's or a wake-up's decision

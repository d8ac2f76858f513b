"""A plan planned on to the end takes over the head of the replay's last plan (whatif/earlier_plans.py,
domain/plan_prefix.py) only as far as a plan of now places those leases as it did: every job starts
at the same second on the same hosts, every arrival is told the same ETA and the same wake-ups are
asked for as when every plan searches for every lease, with durations asked exactly (jobs start
out of the order, backfilled, and end on time), over-asked (they end early: a head is read only
until the next early end) and under-asked (held past their end), and with quotas that may bind
(nothing is taken over). Each plan that took a head over is also checked against the whole plan
of the same inputs, lease by lease."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, Placement, PlannedLease, QuotaLimit
from gpu_tenancy.domain.plan_prefix import EarlierPlan, common_prefix
from gpu_tenancy.domain.planner import Planning, PlannerSettings, plan
from gpu_tenancy.whatif.earlier_plans import EarlierPlans
from gpu_tenancy.whatif.event_loop import simulate
from gpu_tenancy.whatif.planner_sched import quota_limits
from tests.unit.test_replay_lazy import SHARES, Wakes, trace

SEEDS = {"exact": range(16), "over": range(6), "under": range(2)}


def decide(jobs, hosts: int, prefix: bool, mode: str = "open"):
    # fits at 8 waiting: the arrivals' fits plan on to the end, which is where the head is taken over
    sched = Wakes(quota_limits(SHARES, hosts * 8, mode), insert_min_waiting=8, prefix=prefix)
    out = simulate(jobs, hosts, sched)
    assert len(out.start) == len(jobs)
    return (out.start, out.hosts, out.first_eta, sched.answers), out.extra["placed_from_earlier_plans"]


@pytest.mark.parametrize("asking", ["exact", "over", "under"])
def test_plans_taking_over_an_earlier_head_decide_as_plans_searching_all(asking):
    taken = 0
    for seed in SEEDS[asking]:
        jobs = trace(random.Random(seed * 13 + len(asking)), asking, n=60 if asking == "under" else 160)
        hosts = 2 + seed % 3
        plain, none = decide(jobs, hosts, False)
        got, n = decide(jobs, hosts, True)
        assert got == plain, seed
        assert none == 0
        taken += n
    assert taken > (20000 if asking == "exact" else 50)   # the searches saved


def test_each_plan_taking_a_head_over_is_the_whole_plan(monkeypatch):
    advance, checked = Planning.advance, []

    def checking(self, stop=None):
        advance(self, stop)
        if stop is None and self.taken:
            now, hosts, holds, usage, _backend, _protected, _charged = self._inputs
            whole = plan(now, hosts, holds, self.quotas, self.ordered, usage, self.settings, explain=False)
            assert {k: pl.placement for k, pl in self.plan.leases.items()} == \
                   {k: pl.placement for k, pl in whole.leases.items()}
            checked.append(self.taken)
    monkeypatch.setattr(Planning, "advance", checking)
    for seed in range(6):
        for asking in ("exact", "over", "under"):
            decide(trace(random.Random(seed * 5 + len(asking)), asking, n=60 if asking == "under" else 160),
                   2 + seed % 3, True)
    assert len(checked) > 200 and sum(checked) > 5000


def test_no_head_taken_where_a_quota_may_bind():
    jobs = trace(random.Random(3), "exact", n=160)
    plain, _ = decide(jobs, 3, False, "quota")
    got, n = decide(jobs, 3, True, "quota")
    assert got == plain and n == 0


def _lease(lid: str, gpus: int, duration: int) -> LeaseRequest:
    return LeaseRequest(lid, "p", "GPU", gpus, 1, duration, 0, None, 0)


HOSTS = [Host("h0", "GPU", 8), Host("h1", "GPU", 8)]
QUOTAS = {("p", "GPU"): QuotaLimit("p", "GPU", 16, 0, None, 1.0)}


def _planned_then_s_started(s_runs: int, on: str = "h1"):
    """A (6 GPUs, 50 s) and s (2 GPUs, s_runs) planned at 0 on h0 all taken until 100 and h1 half
    taken until then; then s started at 0 on `on`."""
    a, s = _lease("a", 6, 50), _lease("s", 2, s_runs)
    holds = [Hold("x", "p", "h0", "GPU", 8, 0, 100), Hold("y", "p", "h1", "GPU", 4, 0, 100)]
    earlier = EarlierPlans()
    first = Planning(0, HOSTS, holds, QUOTAS, [a, s], None, PlannerSettings(), False)
    first.advance()
    earlier.made(first)
    earlier.started("s", 0, (on,), s_runs)
    return a, first, earlier, [*holds, Hold("s", "p", on, "GPU", 2, 0, s_runs)]


def test_a_job_backfilled_past_a_start_before_it_moves_that_lease():
    """A waits for 100 s and goes on h0 (both hosts all free then: the name decides); s, after it
    in the order, starts now on h1's 4 free GPUs and runs past 100. A plan of now sees s held: h1
    is the tighter host at 100 and A goes there. The head stops before A."""
    a, first, earlier, now_holds = _planned_then_s_started(200)
    assert first.plan.leases["a"].placement == Placement(100, 150, ("h0",))
    assert first.plan.leases["s"].placement == Placement(0, 200, ("h1",))
    head = earlier.head()
    assert head is not None and list(head().order) == []   # a comes before s and starts before s ends
    again = Planning(1, HOSTS, now_holds, QUOTAS, [a], None, PlannerSettings(), False, earlier=head)
    again.advance()
    assert again.plan.leases["a"].placement == Placement(100, 150, ("h1",))
    assert plan(1, HOSTS, now_holds, QUOTAS, [a], explain=False).leases["a"].placement == Placement(100, 150, ("h1",))


def test_a_job_backfilled_before_a_start_leaves_the_head():
    """The same with s ending before A starts: A's search meets h1 as it did, and A is taken over."""
    a, first, earlier, now_holds = _planned_then_s_started(60)
    head = earlier.head()
    assert head is not None and list(head().order) == ["a", "s"]
    again = Planning(1, HOSTS, now_holds, QUOTAS, [a], None, PlannerSettings(), False, earlier=head)
    again.advance()
    assert again.taken == 1
    assert again.plan.leases["a"].placement == first.plan.leases["a"].placement == \
        plan(1, HOSTS, now_holds, QUOTAS, [a], explain=False).leases["a"].placement


def test_no_head_where_a_job_started_elsewhere_than_planned():
    _a, _first, earlier, _holds = _planned_then_s_started(60, on="h0")
    assert earlier.head() is None


def test_the_head_stops_at_a_start_passed_or_a_lease_neither_waiting_nor_started():
    a, b = _lease("a", 1, 10), _lease("b", 1, 10)
    placed = {"a": PlannedLease("a", 1, Placement(10, 20, ("h0",))), "b": PlannedLease("b", 2, Placement(30, 40, ("h0",)))}
    assert common_prefix([a, b], EarlierPlan(["a", "b"], placed), 10) == 2
    assert common_prefix([a, b], EarlierPlan(["a", "b"], placed), 11) == 0   # a's start passed: it would start now
    assert common_prefix([b], EarlierPlan(["a", "b"], placed), 0) == 0           # a is not reserved now
    assert common_prefix([b], EarlierPlan(["a", "b"], placed, started={"a"}), 0) == 1
    assert common_prefix([b, a], EarlierPlan(["a", "b"], placed), 0) == 0        # the order moved

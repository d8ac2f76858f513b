"""The replay's promise rules (gpu_tenancy/whatif/promise.py and GpuTenancy's promise
option): which leases told an ETA go before fair share, and that a rule that
keeps promises does keep one that fair share breaks."""
from __future__ import annotations

import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from gpu_tenancy.whatif.planner_sched import GpuTenancy, quota_limits  # noqa: E402
from gpu_tenancy.whatif.promise import PROMISED, breaches, promised_ids, shape_order, with_promises  # noqa: E402
from traces import Job  # noqa: E402

from gpu_tenancy.domain.model import LeaseRequest, Placement, PlannedLease  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings  # noqa: E402

H = 3600


def req(i: str) -> LeaseRequest:
    return LeaseRequest(i, "p", "GPU", 1, 1, 60, 0, None, 0)


def planned(i: str, start: int | None) -> PlannedLease:
    return PlannedLease(i, 1, None if start is None else Placement(start, start + 60, ("h",)))


def test_near_promises_only_the_etas_due_within_the_horizon():
    told = {"a": 1000 + H, "b": 1000 + 5 * H, "c": 900}   # c: due already (late)
    waiting = ["a", "b", "c", "d"]                          # d: not told yet
    assert promised_ids("near", told, waiting, 1000, horizon=4 * H) == {"a", "c"}
    assert promised_ids("near", told, waiting, 1000, horizon=0) == {"c"}
    assert promised_ids("eta", told, waiting, 1000) == {"a", "b", "c"}
    assert promised_ids("breach", told, waiting, 1000, breached={"b", "x"}) == {"b"}   # x no longer waits


def test_promised_leases_go_first_earliest_eta_first():
    told = {"a": 500, "b": 300}
    out = {r.lease_id: r.priority for r in with_promises("eta", [req("a"), req("b"), req("c")], told, {"a", "b"})}
    assert out["b"] > out["a"] > out["c"] == 0
    assert out["a"] == PROMISED - 500
    fs = {r.lease_id: r.priority for r in with_promises("fairshare", [req("a"), req("c")], told, {"a"})}
    assert fs == {"a": 1, "c": 0}


def test_breaches_are_the_unpromised_leases_planned_past_their_eta():
    plan = {"a": planned("a", 100), "b": planned("b", 101), "c": planned("c", None),
            "d": planned("d", 500), "e": planned("e", 50)}
    told = {"a": 100, "b": 100, "c": 100, "d": 100, "e": 100}
    assert breaches(plan, told, promised={"d"}) == {"b", "c"}          # d already promised; e early
    assert breaches(plan, told, promised={"d"}, slack=1) == {"c"}
    assert breaches({"n": planned("n", 900)}, told, set()) == set()    # not told an ETA yet


# one host of 8 GPUs. j0 (tenant a) holds it until 100; j1 (a) is told 100; j2 (b, who has used
# nothing) arrives next: fair share puts b before a, so j2 takes 100 and j1 is pushed to 200
TRACE = [Job("j0", "a", 0, 100, 8, 1), Job("j1", "a", 1, 100, 8, 1), Job("j2", "b", 2, 100, 8, 1)]


def run(promise: str | None):
    sched = GpuTenancy(quota_limits({"a": 0.5, "b": 0.5}, 8, "open"), promise=promise)
    out = simulate(TRACE, 1, sched)
    return sched.first_eta, out.start


def test_fair_share_breaks_the_first_promise():
    eta, start = run(None)
    assert eta["j1"] == 100 and start["j1"] == 200
    assert eta["j2"] == 100 and start["j2"] == 100


def test_breach_rule_keeps_it_and_tells_the_later_lease_where_it_fits():
    eta, start = run("breach")
    assert (eta["j1"], start["j1"]) == (100, 100)
    assert (eta["j2"], start["j2"]) == (200, 200)   # its ETA is the one it keeps


def test_shape_order_sorts_by_eta_only_within_a_shape_in_its_own_places():
    def r(i: str, g: int) -> LeaseRequest:
        return LeaseRequest(i, "p", "GPU", g, 1, 60, 0, None, 0)
    # fair-share order: a(1 GPU, ETA 300), x(8, ETA 100), b(1, ETA 200), n(1, not told), y(8, ETA 50)
    ordered = [r("a", 1), r("x", 8), r("b", 1), r("n", 1), r("y", 8)]
    told = {"a": 300, "x": 100, "b": 200, "y": 50}
    out = shape_order(ordered, told)
    assert [q.lease_id for q in out] == ["b", "y", "a", "n", "x"]   # 1-GPU places 0, 2; 8-GPU 1, 4
    assert [q.priority for q in out] == [5, 4, 3, 2, 1]             # the planner keeps that order


def test_the_planners_keep_etas_keeps_it_in_the_replay_as_the_breach_rule_does():
    sched = GpuTenancy(quota_limits({"a": 0.5, "b": 0.5}, 8, "open"), settings=PlannerSettings(keep_etas=True))
    out = simulate(TRACE, 1, sched)
    assert (sched.first_eta["j1"], out.start["j1"]) == (100, 100)
    assert (sched.first_eta["j2"], out.start["j2"]) == (200, 200)
    assert sched.requests == {} and sched.guarded == frozenset()   # guarded until it started

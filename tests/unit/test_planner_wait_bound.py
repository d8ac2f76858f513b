"""The wait bound: a lease that has waited `wait_bound` goes before fair share,
in the order the leases began to wait, so later arrivals cannot push it back."""
from __future__ import annotations

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import DEFAULT_WAIT_BOUND, PlannerSettings, order_key, plan

NOW = 1_800_000_000
H = 3600
M = "A100"
BOUND = PlannerSettings(wait_bound=4 * H)
NO_BOUND = PlannerSettings(wait_bound=None)
HEAVY = {("heavy", M): 5000.0, ("light", M): 1.0}


def lease(lid, gpus, project, created, instances=1, duration=H, earliest=None, priority=0):
    return LeaseRequest(lid, project, M, gpus, instances, duration,
                        earliest if earliest is not None else created, None, created, priority)


def quotas():
    return {(p, M): QuotaLimit(p, M, 64) for p in ("heavy", "light", "other")}


def hosts(n=2):
    return [Host(f"h{i}", M, 8) for i in range(n)]


def busy_until(end):
    """Both hosts full until `end` with 4 GPUs each, so nothing big starts now."""
    return [Hold(f"r{i}", "other", f"h{i}", M, 4, NOW - H, end, False) for i in range(2)]


def test_big_lease_past_bound_goes_before_newer_small_lease_of_light_tenant():
    big = lease("big", 8, "heavy", NOW - 5 * H, instances=2)   # waited 5 h
    small = lease("small", 4, "light", NOW - 60, duration=3 * H)
    holds = busy_until(NOW + H)
    p = plan(NOW, hosts(), holds, quotas(), [big, small], HEAVY, BOUND)
    assert list(p.leases) == ["big", "small"]
    assert p.leases["big"].placement.start == NOW + H
    # the small lease could run now on the free halves, but only past big's start: it waits
    assert p.leases["small"].placement.start == NOW + 2 * H
    msgs = [r.message for r in p.leases["small"].reasons if r.code == "order"]
    assert msgs == ["leases that have waited 4 hours or more go before fair share; 1 of them is ahead"]
    assert [r.message for r in p.leases["big"].reasons if r.code == "order"] == [
        "has waited 4 hours or more, so it goes before fair share"]
    assert not [r for r in p.leases["big"].reasons if r.code == "fairshare"]

    # without the bound fair share puts the light tenant first and pushes big back
    p = plan(NOW, hosts(), holds, quotas(), [big, small], HEAVY, NO_BOUND)
    assert list(p.leases) == ["small", "big"]
    assert p.leases["small"].placement.start == NOW
    assert p.leases["big"].placement.start == NOW + 3 * H


def test_below_the_bound_fair_share_still_decides():
    big = lease("big", 8, "heavy", NOW - 4 * H + 1, instances=2)   # one second short of the bound
    small = lease("small", 4, "light", NOW - 60, duration=3 * H)
    p = plan(NOW, hosts(), busy_until(NOW + H), quotas(), [big, small], HEAVY, BOUND)
    assert list(p.leases) == ["small", "big"]
    assert [r.code for r in p.leases["big"].reasons].count("fairshare") == 1


def test_leases_past_the_bound_go_in_the_order_they_began_to_wait():
    # fair share would put light's lease first; past the bound only the wait counts
    a = lease("a", 8, "heavy", NOW - 9 * H)
    b = lease("b", 8, "light", NOW - 6 * H)
    c = lease("c", 8, "light", NOW - 10 * H, earliest=NOW - 5 * H)   # asked to start later: waits since then
    p = plan(NOW, hosts(1), [], quotas(), [b, c, a], HEAVY, BOUND)
    assert list(p.leases) == ["a", "b", "c"]
    assert [p.leases[i].placement.start for i in "abc"] == [NOW, NOW + H, NOW + 2 * H]
    assert [r.message for r in p.leases["c"].reasons if r.code == "order"] == [
        "has waited 4 hours or more, so it goes before fair share; behind 2 leases that began to wait earlier"]


def test_priority_still_comes_first():
    old = lease("old", 8, "heavy", NOW - 50 * H)
    vip = lease("vip", 8, "light", NOW, priority=5)
    p = plan(NOW, hosts(1), [], quotas(), [old, vip], HEAVY, BOUND)
    assert list(p.leases) == ["vip", "old"]


def test_planned_start_past_the_bound_is_not_pushed_back_by_later_arrivals():
    big = lease("big", 8, "heavy", NOW - 5 * H, instances=2)
    holds = busy_until(NOW + H)
    before = plan(NOW, hosts(), holds, quotas(), [big], HEAVY, BOUND).leases["big"].placement.start
    newcomers = [lease(f"n{i}", 4, "light", NOW - i, duration=2 * H) for i in range(6)]
    after = plan(NOW, hosts(), holds, quotas(), [big, *newcomers], HEAVY, BOUND)
    assert after.leases["big"].placement.start == before == NOW + H


def test_the_service_default_is_fair_share_alone():
    assert PlannerSettings().wait_bound is DEFAULT_WAIT_BOUND is None
    big = lease("big", 8, "heavy", NOW - 100 * H)
    small = lease("small", 8, "light", NOW - 1)
    q = quotas()
    assert order_key(big, q, HEAVY, NOW, 4 * H) < order_key(small, q, HEAVY, NOW, 4 * H)
    assert order_key(small, q, HEAVY, NOW, None) < order_key(big, q, HEAVY, NOW, None)
    assert list(plan(NOW, hosts(1), [], q, [big, small], HEAVY).leases) == ["small", "big"]

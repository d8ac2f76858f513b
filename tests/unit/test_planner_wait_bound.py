"""The wait bound: a lease that has waited `wait_bound` seconds (or
`wait_bound_gpu_hours` GPU-hours) goes before fair share, in the order the
leases reached the bound, so later arrivals cannot push it back."""
from __future__ import annotations

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import DEFAULT_WAIT_BOUND, PlannerSettings, bound_protected, order_key, plan

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
        "has waited 4 hours or more, so it goes before fair share; behind 2 leases that reached it earlier"]


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
    assert order_key(big, q, HEAVY, NOW, BOUND) < order_key(small, q, HEAVY, NOW, BOUND)
    assert order_key(small, q, HEAVY, NOW, NO_BOUND) < order_key(big, q, HEAVY, NOW, NO_BOUND)
    assert list(plan(NOW, hosts(1), [], q, [big, small], HEAVY).leases) == ["small", "big"]


GH_BOUND = PlannerSettings(wait_bound_gpu_hours=32)


def test_a_gpu_hours_bound_is_reached_sooner_by_a_bigger_lease():
    # 16 GPUs for 2 h = 32 GPU-hours: past the bound; 4 GPUs for 7 h = 28: not yet
    big = lease("big", 8, "heavy", NOW - 2 * H, instances=2)
    small = lease("small", 4, "heavy", NOW - 7 * H)
    light = lease("light", 4, "light", NOW - 60, duration=3 * H)
    p = plan(NOW, hosts(), busy_until(NOW + H), quotas(), [light, small, big], HEAVY, GH_BOUND)
    assert list(p.leases) == ["big", "light", "small"]
    assert p.leases["big"].placement.start == NOW + H
    assert [r.message for r in p.leases["big"].reasons if r.code == "order"] == [
        "has waited 32 GPU-hours (its GPUs times the hours it waited) or more, so it goes before fair share"]
    # one second short of 32 GPU-hours, fair share decides again
    nearly = lease("big", 8, "heavy", NOW - 2 * H + 1, instances=2)
    assert list(plan(NOW, hosts(), busy_until(NOW + H), quotas(), [light, nearly], HEAVY, GH_BOUND).leases) == [
        "light", "big"]


def test_past_a_gpu_hours_bound_leases_go_in_the_order_they_reached_it():
    # a: 1 GPU since 40 h ago reached 32 GPU-hours 8 h ago; b: 8 GPUs since 5 h ago reached it 1 h ago;
    # c: 8 GPUs since 6 h ago reached it 2 h ago. Order: a, c, b (not by when they began to wait)
    a = lease("a", 1, "light", NOW - 40 * H)
    b = lease("b", 8, "light", NOW - 5 * H)
    c = lease("c", 8, "heavy", NOW - 6 * H)
    p = plan(NOW, hosts(1), [Hold("r", "other", "h0", M, 8, NOW - H, NOW + H, False)], quotas(),
             [b, c, a], HEAVY, GH_BOUND)
    assert list(p.leases) == ["a", "c", "b"]
    assert [p.leases[i].placement.start for i in "acb"] == [NOW + H, NOW + 2 * H, NOW + 3 * H]


def test_both_bounds_set_the_first_reached_counts():
    both = PlannerSettings(wait_bound=10 * H, wait_bound_gpu_hours=32)
    small = lease("small", 1, "heavy", NOW - 11 * H)   # 11 GPU-hours, but past 10 h
    big = lease("big", 8, "heavy", NOW - 4 * H)        # 32 GPU-hours, 4 h
    light = lease("light", 8, "light", NOW)
    q = quotas()
    assert order_key(small, q, HEAVY, NOW, both) < order_key(big, q, HEAVY, NOW, both) \
        < order_key(light, q, HEAVY, NOW, both)
    p = plan(NOW, hosts(1), [Hold("r", "other", "h0", M, 8, NOW - H, NOW + H, False)], q,
             [light, big, small], HEAVY, both)
    assert [r.message for r in p.leases["light"].reasons if r.code == "order"] == [
        "leases that have waited 10 hours or more, or 32 GPU-hours (its GPUs times the hours it waited) or more "
        "go before fair share; 2 of them are ahead"]


def test_wait_bound_leases_lets_only_the_first_to_reach_the_bound_go_before_fair_share():
    one = PlannerSettings(wait_bound=4 * H, wait_bound_leases=1)
    # heavy floods small leases that reached the bound before light's big one did; with every lease
    # past the bound going first, the flood would keep the big lease back too
    flood = [lease(f"f{i}", 8, "heavy", NOW - (9 - i) * H) for i in range(3)]
    fresh = lease("fresh", 8, "light", NOW - 60)
    p = plan(NOW, hosts(1), [], quotas(), [fresh, *flood], HEAVY, one)
    assert list(p.leases) == ["f0", "fresh", "f1", "f2"]
    assert [r.message for r in p.leases["f0"].reasons if r.code == "order"] == []   # starts now
    assert [r.message for r in p.leases["f1"].reasons if r.code == "order"] == [
        "leases that have waited 4 hours or more go before fair share; 1 of them is ahead",
        "has waited 4 hours or more, but only the first lease to reach it goes before fair share; "
        "its turn comes as those start"]
    assert [r.code for r in p.leases["f1"].reasons].count("fairshare") == 1
    # without the limit every lease past the bound goes first, in the order they reached it
    assert list(plan(NOW, hosts(1), [], quotas(), [fresh, *flood], HEAVY, BOUND).leases) == [
        "f0", "f1", "f2", "fresh"]


def test_wait_bound_leases_counts_per_gpu_model():
    one = PlannerSettings(wait_bound=4 * H, wait_bound_leases=1)
    h100 = LeaseRequest("h", "heavy", "H100", 8, 1, H, NOW - 5 * H, None, NOW - 5 * H)
    a100 = [lease(f"a{i}", 8, "heavy", NOW - (6 - i) * H) for i in range(2)]
    assert bound_protected([h100, *a100], NOW, one) == {"h", "a0"}
    assert bound_protected([h100, *a100], NOW, BOUND) == {"h", "a0", "a1"}
    assert bound_protected([h100, *a100], NOW, NO_BOUND) == set()

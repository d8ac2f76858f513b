"""Hand-checked planner cases: every expected time below was worked out by hand."""
from __future__ import annotations

from gpu_tenancy.domain.capacity import StepProfile
from gpu_tenancy.domain.planner import (
    can_ever_fit, can_ever_fit_on, extension_conflicts, fmt_time, largest_free_block, plan)
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit

NOW = 1_800_000_000
H = 3600
M = "A100"


def host(name, gpus=8, enabled=True, aggregate=None, model=M):
    return Host(name, model, gpus, enabled, aggregate)


def hold(lid, host_, gpus, end, project="busy", start=NOW - H, model=M, borrowing=False):
    return Hold(lid, project, host_, model, gpus, start, end, borrowing)


def lease(lid, gpus, duration, project="p1", instances=1, earliest=NOW, latest=None,
          created=None, priority=0, model=M):
    return LeaseRequest(lid, project, model, gpus, instances, duration, earliest, latest,
                        created if created is not None else NOW - 100, priority)


def quotas(*projects, gpus=1000, **kw):
    return {(p, M): QuotaLimit(p, M, gpus, **kw) for p in projects + ("busy",)}


def codes(pl):
    return [r.code for r in pl.reasons]


# -- backfill ---------------------------------------------------------------

def test_backfill_fills_gap_before_big_lease():
    # h1 has 4 free now, all 8 free at NOW+2h. The 8-GPU lease must wait for
    # NOW+2h; the short 4-GPU lease fits in the gap and ends before it.
    hosts = [host("h1")]
    holds = [hold("r", "h1", 4, NOW + 2 * H)]
    big = lease("big", 8, 4 * H, created=NOW - 200)
    small = lease("small", 4, 1 * H, created=NOW - 100)
    p = plan(NOW, hosts, holds, quotas("p1"), [big, small])
    assert p.leases["big"].placement.start == NOW + 2 * H
    assert p.leases["small"].placement.start == NOW
    assert list(p.leases) == ["big", "small"]
    assert [pl.lease_id for pl in p.startable()] == ["small"]


def test_backfill_must_not_delay_lease_ahead():
    # same, but the small lease would run past NOW+2h and delay the big one
    hosts = [host("h1")]
    holds = [hold("r", "h1", 4, NOW + 2 * H)]
    big = lease("big", 8, 4 * H, created=NOW - 200)
    small = lease("small", 4, 3 * H, created=NOW - 100)
    p = plan(NOW, hosts, holds, quotas("p1"), [big, small])
    assert p.leases["big"].placement.start == NOW + 2 * H
    assert p.leases["small"].placement.start == NOW + 6 * H   # after big ends
    assert "order" in codes(p.leases["small"])
    assert "capacity" in codes(p.leases["small"])


# -- exact ETA --------------------------------------------------------------

def test_eta_is_exactly_end_of_hold_it_waits_for():
    end = NOW + 5 * H + 17 * 60 + 3
    hosts = [host("h1"), host("h2")]
    holds = [hold("a", "h1", 8, end), hold("b", "h2", 6, NOW + 9 * H)]
    p = plan(NOW, hosts, holds, quotas("p1"), [lease("x", 4, H)])
    pl = p.leases["x"]
    assert pl.eta == end
    assert pl.placement.hosts == ("h1",)
    msg = [r.message for r in pl.reasons if r.code == "capacity"][0]
    assert msg == (f"needs 4 A100 on one host; the largest free block now is 2; "
                   f"earliest at {fmt_time(end)}")
    assert fmt_time(end).endswith("Z")


# -- gang ---------------------------------------------------------------------

def test_gang_starts_all_vms_together():
    # 3 VMs of 8: h1 free now, h2 free at +1h, h3 free at +3h -> all at +3h
    hosts = [host("h1"), host("h2"), host("h3")]
    holds = [hold("a", "h2", 8, NOW + H), hold("b", "h3", 8, NOW + 3 * H)]
    p = plan(NOW, hosts, holds, quotas("p1"), [lease("g", 8, 2 * H, instances=3)])
    pl = p.leases["g"]
    assert pl.placement.start == NOW + 3 * H
    assert sorted(pl.placement.hosts) == ["h1", "h2", "h3"]


def test_gang_may_share_host_and_prefers_one_aggregate():
    hosts = [host("a1", aggregate="A"), host("b1", aggregate="B"), host("b2", aggregate="B")]
    p = plan(NOW, hosts, [], quotas("p1"), [lease("g", 4, H, instances=4)])
    pl = p.leases["g"]
    assert pl.placement.start == NOW
    assert sorted(pl.placement.hosts) == ["b1", "b1", "b2", "b2"]


# -- best fit -----------------------------------------------------------------

def test_best_fit_keeps_whole_host_for_8gpu_lease():
    hosts = [host("a"), host("b")]
    holds = [hold("r", "b", 5, NOW + 10 * H)]        # b has 3 free
    ws = [lease(f"s{i}", 1, H, created=NOW - 100 + i) for i in range(3)]
    ws.append(lease("big", 8, H, created=NOW))
    p = plan(NOW, hosts, holds, quotas("p1"), ws)
    for i in range(3):
        assert p.leases[f"s{i}"].placement.hosts == ("b",)
        assert p.leases[f"s{i}"].placement.start == NOW
    assert p.leases["big"].placement == p.leases["big"].placement.__class__(NOW, NOW + H, ("a",))


# -- quota over time ---------------------------------------------------------

def test_quota_eta_is_end_of_own_hold():
    hosts = [host("h1"), host("h2"), host("h3")]
    own_end = NOW + 7 * H
    holds = [hold("mine", "h1", 8, own_end, project="p1"),
             hold("mine", "h2", 8, own_end, project="p1")]
    q = {("p1", M): QuotaLimit("p1", M, 16)}
    p = plan(NOW, hosts, holds, q, [lease("x", 8, H)])
    pl = p.leases["x"]
    assert pl.eta == own_end
    assert codes(pl) == ["quota"]
    assert pl.reasons[0].message == (
        f"project p1 holds 16 of 16 A100 GPUs until {fmt_time(own_end)} (this lease needs 8)")


def test_borrowing_on_idle_capacity_now():
    hosts = [host("h1"), host("h2")]
    holds = [hold("mine", "h1", 8, NOW + 7 * H, project="p1")]
    q = {("p1", M): QuotaLimit("p1", M, 8, borrow_gpus=8)}
    p = plan(NOW, hosts, holds, q, [lease("x", 8, H)])
    pl = p.leases["x"]
    assert pl.placement.start == NOW and pl.borrowing
    assert "borrowing" in codes(pl)


def test_a_borrower_pushes_back_no_lease_of_its_project_planned_ahead_of_it():
    """h1 is busy for 20 minutes; h2 is idle until 6000 s. a (4 GPUs, 2 h) cannot finish on h2 in
    time: it is planned on h1 at 20 minutes, within p1's quota of 4. b (4 GPUs, 1.5 h, after a in
    the order) would fit on h2 now by borrowing, but once it ran it would count against p1's quota
    before a (a hold), and the next plan would move a to b's end: b waits for the quota instead."""
    hosts = [host("h1"), host("h2", gpus=4)]
    holds = [hold("x", "h1", 8, NOW + 1200), hold("y", "h2", 4, NOW + 9000, start=NOW + 6000)]
    q = {("p1", M): QuotaLimit("p1", M, 4, borrow_gpus=4), ("busy", M): QuotaLimit("busy", M, 12)}
    a, b = lease("a", 4, 2 * H, created=NOW - 20), lease("b", 4, 5400, created=NOW - 10)
    p = plan(NOW, hosts, holds, q, [a, b])
    assert p.leases["a"].placement.start == NOW + 1200
    assert not p.leases["b"].borrowing and p.leases["b"].placement.start == NOW + 1200 + 2 * H
    assert any("may not borrow" in r.message for r in p.leases["b"].reasons)
    # where its project has nothing planned over its run, it still borrows (a is another
    # project's here, and p1 has no nominal quota left)
    q_apart = {**q, ("p1", M): QuotaLimit("p1", M, 0, borrow_gpus=4), ("p2", M): QuotaLimit("p2", M, 4)}
    p = plan(NOW, hosts, holds, q_apart, [lease("a", 4, 2 * H, project="p2", created=NOW - 20), b])
    assert p.leases["b"].borrowing and p.leases["b"].placement.start == NOW


def test_no_quota_means_zero():
    p = plan(NOW, [host("h1")], [], {}, [lease("x", 1, H)])
    assert p.leases["x"].placement is None
    assert codes(p.leases["x"]) == ["quota"]


# -- order ----------------------------------------------------------------------

def test_fair_share_order_less_usage_first():
    hosts = [host("h1")]
    ws = [lease("heavy", 8, H, project="p1", created=NOW - 500),
          lease("light", 8, H, project="p2", created=NOW - 100)]
    usage = {("p1", M): 412.0, ("p2", M): 3.0}
    p = plan(NOW, hosts, [], quotas("p1", "p2"), ws, usage)
    assert list(p.leases) == ["light", "heavy"]
    assert p.leases["light"].placement.start == NOW
    heavy = p.leases["heavy"]
    assert heavy.placement.start == NOW + H
    assert heavy.position == 2
    fs = [r.message for r in heavy.reasons if r.code == "fairshare"]
    assert fs == ["project p1 has used 412 A100 GPU-hours recently against weight 1; "
                  "1 lease of projects that used less go first"]


def test_fair_share_uses_weight():
    ws = [lease("a", 8, H, project="p1"), lease("b", 8, H, project="p2")]
    usage = {("p1", M): 100.0, ("p2", M): 60.0}
    q = {("p1", M): QuotaLimit("p1", M, 8, weight=4.0), ("p2", M): QuotaLimit("p2", M, 8)}
    p = plan(NOW, [host("h1")], [], q, ws, usage)
    assert list(p.leases) == ["a", "b"]   # 100/4 < 60/1


def test_priority_order_beats_usage_and_age():
    ws = [lease("old", 8, H, project="p2", created=NOW - 900),
          lease("old2", 8, H, project="p2", created=NOW - 800),
          lease("vip", 8, H, project="p1", created=NOW, priority=5)]
    usage = {("p1", M): 1e6}
    p = plan(NOW, [host("h1")], [], quotas("p1", "p2"), ws, usage)
    assert list(p.leases) == ["vip", "old", "old2"]
    assert p.leases["vip"].placement.start == NOW
    assert [r.message for r in p.leases["old2"].reasons if r.code == "priority"] == [
        "behind 1 lease of higher priority"]
    assert [r.message for r in p.leases["old2"].reasons if r.code == "order"] == [
        "behind 1 lease submitted earlier"]
    assert p.leases["old2"].placement.start == NOW + 2 * H


def test_position_is_per_gpu_model():
    hosts = [host("a"), host("h", model="H100")]
    ws = [lease("x1", 1, H, created=NOW - 3), lease("y1", 1, H, model="H100", created=NOW - 2),
          lease("x2", 1, H, created=NOW - 1)]
    q = quotas("p1")
    q[("p1", "H100")] = QuotaLimit("p1", "H100", 8)
    p = plan(NOW, hosts, [], q, ws)
    assert [p.leases[i].position for i in ("x1", "y1", "x2")] == [1, 1, 2]


# -- limits -----------------------------------------------------------------------

def test_latest_start_not_reserved():
    hosts = [host("h1")]
    holds = [hold("r", "h1", 8, NOW + 4 * H)]
    ws = [lease("late", 8, H, latest=NOW + 2 * H, created=NOW - 200), lease("next", 8, H)]
    p = plan(NOW, hosts, holds, quotas("p1"), ws)
    late = p.leases["late"]
    assert late.placement is None
    assert late.reasons[-1].code == "latest_start"
    assert fmt_time(NOW + 4 * H) in late.reasons[-1].message
    assert p.leases["next"].placement.start == NOW + 4 * H   # not blocked by "late"


def test_max_duration():
    q = {("p1", M): QuotaLimit("p1", M, 8, max_duration=2 * H)}
    p = plan(NOW, [host("h1")], [], q, [lease("x", 1, 3 * H), lease("y", 1, 2 * H)])
    assert p.leases["x"].placement is None and codes(p.leases["x"]) == ["duration"]
    assert p.leases["y"].placement.start == NOW


def test_unplaceable():
    hosts = [host("h1", 4), host("h2", 4), host("big", 8, enabled=False)]
    ws = [lease("too-wide", 8, H), lease("too-many", 4, H, instances=3),
          lease("no-model", 1, H, model="X9")]
    q = quotas("p1")
    q[("p1", "X9")] = QuotaLimit("p1", "X9", 8)
    p = plan(NOW, hosts, [], q, ws)
    for lid in ("too-wide", "too-many", "no-model"):
        assert p.leases[lid].placement is None
        assert codes(p.leases[lid]) == ["unplaceable"]
    assert "largest enabled A100 host has 4" in p.leases["too-wide"].reasons[0].message
    assert not can_ever_fit(hosts, M, 8, 1)
    assert not can_ever_fit(hosts, M, 4, 3)
    assert can_ever_fit(hosts, M, 4, 2)
    assert can_ever_fit(hosts, M, 2, 4)


def test_disabled_host_gets_nothing_but_its_holds_count_for_quota():
    hosts = [host("off", enabled=False), host("on")]
    holds = [hold("r", "off", 8, NOW + 3 * H, project="p1")]
    q = {("p1", M): QuotaLimit("p1", M, 12)}
    p = plan(NOW, hosts, holds, q, [lease("x", 8, H), lease("y", 4, H)])
    assert p.leases["x"].placement.hosts == ("on",)
    assert p.leases["x"].placement.start == NOW + 3 * H   # quota: 8 held on the disabled host
    assert p.leases["y"].placement == p.leases["y"].placement.__class__(NOW, NOW + H, ("on",))
    assert largest_free_block(hosts, holds, M, NOW) == 8


# -- extensions ------------------------------------------------------------------

def test_extension_allowed_when_nobody_waits_for_it():
    hosts = [host("h1"), host("h2")]
    holds = [hold("mine", "h1", 4, NOW + 2 * H, project="p1")]
    out = extension_conflicts(NOW, hosts, holds, quotas("p1"), [lease("x", 8, H)], None,
                              "mine", NOW + 5 * H)
    assert out == []


def test_extension_refused_when_it_delays_a_waiting_lease():
    hosts = [host("h1")]
    holds = [hold("mine", "h1", 4, NOW + 2 * H, project="p1"),
             hold("other", "h1", 4, NOW + 2 * H)]
    ws = [lease("x", 8, H)]     # planned at +2h on h1
    out = extension_conflicts(NOW, hosts, holds, quotas("p1"), ws, None, "mine", NOW + 3 * H)
    assert len(out) == 1
    assert out[0].startswith(f"extending to {fmt_time(NOW + 3 * H)} would delay lease x "
                             f"(planned at {fmt_time(NOW + 2 * H)}, would start at {fmt_time(NOW + 3 * H)})")


def test_extension_refused_by_other_hold_and_by_quota():
    hosts = [host("h1")]
    holds = [hold("mine", "h1", 4, NOW + 2 * H, project="p1"),
             hold("next", "h1", 8, NOW + 6 * H, start=NOW + 3 * H)]
    out = extension_conflicts(NOW, hosts, holds, quotas("p1"), [], None, "mine", NOW + 4 * H)
    assert out and "host h1" in out[0]
    holds = [hold("mine", "h1", 4, NOW + 2 * H, project="p1"),
             hold("later", "h1", 2, NOW + 6 * H, start=NOW + 3 * H, project="p1")]
    q = {("p1", M): QuotaLimit("p1", M, 5)}
    out = extension_conflicts(NOW, hosts, holds, q, [], None, "mine", NOW + 4 * H)
    assert out and "project p1 would hold 6 of 5" in out[0]
    assert extension_conflicts(NOW, hosts, holds, q, [], None, "mine", NOW + 3 * H) == []


# -- profiles -----------------------------------------------------------------------

def test_step_profile():
    p = StepProfile(0, 8)
    p.add(10, 20, -4)
    p.add(15, 30, -4)
    assert [p.value_at(t) for t in (0, 10, 15, 20, 30)] == [8, 4, 0, 4, 8]
    assert p.min_on(0, 10) == 8 and p.min_on(5, 16) == 0
    assert p.earliest_fit(0, 10, 8) == 0
    assert p.earliest_fit(0, 11, 8) == 30
    assert p.earliest_fit(12, 5, 4) == 20
    p.add(10, 30, 4)
    p.add(15, 20, 4)
    assert p.times == [0] and p.vals == [8]


def test_can_ever_fit_on_gpu_counts_alone():
    assert can_ever_fit_on([4, 4], 4, 2) and can_ever_fit_on([4, 4], 2, 4) and can_ever_fit_on([8, 3], 3, 3)
    assert not can_ever_fit_on([4, 4], 8, 1)
    assert not can_ever_fit_on([4, 4], 4, 3)
    assert not can_ever_fit_on([8, 3], 3, 4)
    assert not can_ever_fit_on([8], 0, 1) and not can_ever_fit_on([8], 1, 0) and not can_ever_fit_on([], 1, 1)

"""Queue reasons that agree with themselves (issue 19, trap 5): the figures a reason gives are
the ones that hold the lease back. Hand-checked cases, then a seeded promise over random plans."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings, fmt_time, plan
from gpu_tenancy.domain.reclaim import ReclaimSettings, early_ends
from tests.unit.test_planner_oracle import NOW, case, wide_case

H = 3600
M = "H100"
QUOTA = re.compile(r"project \S+ holds (\d+) of (\d+) \S+ GPUs until (\S+) \(this lease needs (\d+)\)")


def test_the_held_count_is_taken_where_the_quota_blocks_not_at_the_asked_start():
    """ml-vision may hold 4 H100. Its first lease (4 GPUs, 2 h) waits an hour for GPUs another
    project holds and is planned 09:00-11:00; its second (1 GPU, 1 h) finds the quota free now but
    no GPU until 09:00, and at 09:00 the first lease holds all 4 until 11:00. The reason said
    "holds 0 of 4" (counted over 08:00-09:00, where nothing of it is held)."""
    hosts = [Host("h1", M, 4), Host("h2", M, 4)]
    holds = [Hold("busy1", "other", "h1", M, 4, NOW - H, NOW + H), Hold("busy2", "other", "h2", M, 4, NOW - H, NOW + H)]
    quotas = {("ml-vision", M): QuotaLimit("ml-vision", M, 4), ("other", M): QuotaLimit("other", M, 8)}
    first = LeaseRequest("first", "ml-vision", M, 4, 1, 2 * H, NOW, None, NOW - 200)
    second = LeaseRequest("second", "ml-vision", M, 1, 1, H, NOW, None, NOW - 100)
    p = plan(NOW, hosts, holds, quotas, [first, second])
    assert p.leases["first"].placement.start == NOW + H
    assert p.leases["second"].placement.start == NOW + 3 * H
    said = [r.message for r in p.leases["second"].reasons if r.code == "quota"]
    assert said == [f"project ml-vision holds 4 of 4 H100 GPUs until {fmt_time(NOW + 3 * H)} (this lease needs 1)"]


@pytest.mark.parametrize("make, seeds", [(case, range(0, 300)), (wide_case, range(10_000, 10_160))])
def test_a_quota_reason_never_says_the_lease_would_fit(make, seeds):
    """The promise on seeded random plans: where a reason says the quota holds a lease back
    until T, what it says is held plus what the lease needs is more than the quota, and T is
    no later than the lease's planned start."""
    checked = 0
    for seed in seeds:
        hosts, holds, quotas, waiting, usage = make(seed)
        p = plan(NOW, hosts, holds, quotas, waiting, usage)
        for lid, pl in p.leases.items():
            for r in pl.reasons:
                found = QUOTA.fullmatch(r.message)
                if r.code != "quota" or found is None:
                    continue
                held, quota, until, need = found.groups()
                assert int(held) + int(need) > int(quota), (seed, lid, r.message)
                assert pl.placement is None or until <= fmt_time(pl.placement.start), (seed, lid, r.message)
                checked += 1
    assert checked > 5   # the cases do reach the quota reason


# -- the ETA counts on the reclaim the reasons announce -------------------------

def test_the_eta_counts_on_a_reclaim_announced_for_after_the_minimum_runtime():
    """lender may hold 8 A100; borrower's lease started 10 minutes ago holds all 8 of h1, borrowed,
    until 18:00. The note says "reclaim after 08:50 (its minimum runtime of 1 hour)": then, with
    15 minutes' notice and the cloud's 5 s release, lender's lease starts at 09:05:05, not at 18:00:05."""
    m, allowance = "A100", 5
    settings = ReclaimSettings(reclaim_after=H, notice=15 * 60, min_runtime=H)
    planner = PlannerSettings(release_allowance=allowance)
    hosts = [Host("h1", m, 8)]
    holds = [Hold("young", "borrower", "h1", m, 8, NOW - 10 * 60, NOW + 10 * H + allowance, borrowing=True,
                  allowance=allowance)]
    quotas = {("lender", m): QuotaLimit("lender", m, 8), ("borrower", m): QuotaLimit("borrower", m, 0, borrow_gpus=8)}
    waiting = [LeaseRequest("l8", "lender", m, 8, 1, 2 * H, NOW, None, NOW - 60)]
    current = plan(NOW, hosts, holds, quotas, waiting, None, planner)
    assert current.leases["l8"].eta == NOW + 10 * H + allowance
    result = early_ends(NOW, hosts, holds, quotas, waiting, None, current, settings, planner_settings=planner)
    assert result.ends == []
    assert [r.message for r in result.notes["l8"]] == [
        f"another project is borrowing 8 A100 until {fmt_time(NOW + 10 * H)}; reclaim after "
        f"{fmt_time(NOW + 50 * 60)} (its minimum runtime of 1 hour)"]
    assert result.etas == {"l8": NOW + 65 * 60 + allowance}
    # and it is what happens: at 08:50 the lease is taken, and the replan puts l8 at 09:05:05
    later = NOW + 50 * 60
    current = plan(later, hosts, holds, quotas, waiting, None, planner)
    result = early_ends(later, hosts, holds, quotas, waiting, None, current, settings, planner_settings=planner)
    assert [e.lease_id for e in result.ends] == ["young"] and result.ends[0].at == later + 15 * 60
    cut = [replace(h, end=later + 15 * 60 + allowance) for h in holds]
    assert plan(later, hosts, cut, quotas, waiting, None, planner).leases["l8"].eta == NOW + 65 * 60 + allowance


def test_no_eta_is_promised_on_a_reclaim_that_will_not_come():
    """The same borrower, but lender yielded GPUs to it earlier (no reclaim goes back), or the
    borrowing lease is lender's own: no note announces a reclaim, and the ETA stays the plan's."""
    m = "A100"
    settings = ReclaimSettings(reclaim_after=H, notice=15 * 60, min_runtime=H)
    hosts = [Host("h1", m, 8)]
    quotas = {("lender", m): QuotaLimit("lender", m, 8, borrow_gpus=8),
              ("borrower", m): QuotaLimit("borrower", m, 0, borrow_gpus=8)}
    waiting = [LeaseRequest("l8", "lender", m, 8, 1, 2 * H, NOW, None, NOW - 60)]
    for owner, yielded in (("borrower", frozenset({("lender", "borrower")})), ("lender", frozenset())):
        holds = [Hold("young", owner, "h1", m, 8, NOW - 10 * 60, NOW + 10 * H, borrowing=True)]
        current = plan(NOW, hosts, holds, quotas, waiting)
        result = early_ends(NOW, hosts, holds, quotas, waiting, None, current, settings, yielded=yielded)
        assert result.ends == [] and result.etas == {}
        assert not any("reclaim after" in r.message for r in result.notes.get("l8", []))


def test_no_eta_is_promised_when_the_wait_is_too_short_to_reclaim_for():
    """A borrower that has run its minimum runtime (since 5 minutes ago) ends in 58 minutes: reclaim
    is only for a wait over an hour, so the ETA is its end, not a reclaim's."""
    m = "A100"
    settings = ReclaimSettings(reclaim_after=H, notice=15 * 60, min_runtime=H)
    hosts = [Host("h1", m, 8)]
    quotas = {("lender", m): QuotaLimit("lender", m, 8), ("borrower", m): QuotaLimit("borrower", m, 0, borrow_gpus=8)}
    waiting = [LeaseRequest("l8", "lender", m, 8, 1, 2 * H, NOW, None, NOW - 60)]
    holds = [Hold("old", "borrower", "h1", m, 8, NOW - 65 * 60, NOW + 58 * 60, borrowing=True)]
    current = plan(NOW, hosts, holds, quotas, waiting)
    result = early_ends(NOW, hosts, holds, quotas, waiting, None, current, settings)
    assert "reclaim only for a wait over 1 hour" in result.notes["l8"][0].message
    assert result.ends == [] and result.etas == {}


def test_borrowers_taken_at_one_instant_are_counted_on_in_the_order_that_reclaim_takes_them_not_by_id():
    """Two borrowers started the same second, so a later reclaim may take both at 08:50: "small"
    holds all 4 A100 of h1, "big" all 8 of h2. lender's l8 (8 GPUs) then l4 (4 GPUs) wait for
    them. Which one l8 counts on decides whether l4 can count on the other. The engine's lease ids
    are random, so the same history, its leases named otherwise, must tell the same ETAs. The ties
    go in the order the reclaim at 08:50 will take victims (asked for last, first): l8 counts on
    big alone and l4 on small, as that reclaim will decide. By id, "a" small first, l8 counted on
    both and l4 on none."""
    m = "A100"
    settings = ReclaimSettings(reclaim_after=H, notice=15 * 60, min_runtime=H)
    hosts = [Host("h1", m, 4), Host("h2", m, 8)]
    quotas = {("lender", m): QuotaLimit("lender", m, 12),
              ("borrower", m): QuotaLimit("borrower", m, 0, borrow_gpus=12)}
    waiting = [LeaseRequest("l8", "lender", m, 8, 1, 2 * H, NOW, None, NOW - 60),
               LeaseRequest("l4", "lender", m, 4, 1, 2 * H, NOW, None, NOW - 30)]
    told = []
    for small, big in (("a", "b"), ("b", "a")):
        holds = [Hold(small, "borrower", "h1", m, 4, NOW - 10 * 60, NOW + 10 * H, borrowing=True,
                      asked=(NOW - 20 * 60, 1)),
                 Hold(big, "borrower", "h2", m, 8, NOW - 10 * 60, NOW + 10 * H, borrowing=True,
                      asked=(NOW - 20 * 60, 2))]
        current = plan(NOW, hosts, holds, quotas, waiting)
        told.append(early_ends(NOW, hosts, holds, quotas, waiting, None, current, settings).etas)
    assert told[0] == told[1] == {"l8": NOW + 65 * 60, "l4": NOW + 65 * 60}

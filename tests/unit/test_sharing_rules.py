"""Sharing rules on the pure planner: borrowing, reclaim, preemption, budgets and
extension windows. Every expected figure was worked out by hand."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_tenancy.domain import budget
from gpu_tenancy.domain.extension import window_refusal
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import extension_conflicts, fmt_time, plan
from gpu_tenancy.domain.reclaim import ReclaimSettings, early_ends

NOW = 1_800_000_000        # 2027-01-15T08:00:00Z
H = 3600
M = "A100"
SETTINGS = ReclaimSettings(reclaim_after=H, notice=15 * 60, min_runtime=H)
DEADLINE = NOW + 15 * 60


def hosts(*names, gpus=8):
    return [Host(n, M, gpus) for n in names]


def held(lid, host, gpus, project, start=NOW - 3 * H, end=NOW + 10 * H, borrowing=False,
         preemptible=False, priority=0):
    return Hold(lid, project, host, M, gpus, start, end, borrowing, preemptible, priority)


def asked(lid, gpus, project, duration=2 * H, instances=1, preemptible=False, priority=0, created=NOW - 60):
    return LeaseRequest(lid, project, M, gpus, instances, duration, NOW, None, created, priority,
                        preemptible=preemptible)


QUOTAS = {("lender", M): QuotaLimit("lender", M, 8),
          ("borrower", M): QuotaLimit("borrower", M, 4, borrow_gpus=16)}


def decide(hs, holds, waiting, quotas=QUOTAS, settings=SETTINGS, **kw):
    current = plan(NOW, hs, holds, quotas, waiting)
    return current, early_ends(NOW, hs, holds, quotas, waiting, None, current, settings, **kw)


def victims(result):
    return sorted(e.lease_id for e in result.ends)


# -- borrowing --------------------------------------------------------------

def test_borrowing_only_on_capacity_idle_now():
    # borrower (4 nominal + 16 borrowable) asks for 8: h1 is idle now, so it borrows.
    p = plan(NOW, hosts("h1"), [], QUOTAS, [asked("b", 8, "borrower")])
    assert p.leases["b"].placement.start == NOW and p.leases["b"].borrowing
    assert "8 of 4 GPUs (may borrow 16)" in p.leases["b"].reasons[0].message
    # h1 busy for 2 more hours: borrowing never reserves capacity later, so it gets no slot.
    p = plan(NOW, hosts("h1"), [held("x", "h1", 8, "lender", end=NOW + 2 * H)], QUOTAS,
             [asked("b", 8, "borrower")])
    assert p.leases["b"].placement is None
    assert "can only borrow capacity idle now" in p.leases["b"].reasons[-1].message


# -- reclaim ----------------------------------------------------------------

def borrowed_cluster():
    """h1: one 8-GPU borrowing lease (old). h2: two 4-GPU borrowing leases, b_mid
    started 2 h ago and b_new 90 minutes ago. All run for 10 more hours."""
    return hosts("h1", "h2"), [
        held("b_old", "h1", 8, "borrower", start=NOW - 5 * H, borrowing=True),
        held("b_mid", "h2", 4, "borrower", start=NOW - 2 * H, borrowing=True),
        held("b_new", "h2", 4, "borrower", start=NOW - 90 * 60, borrowing=True),
    ]


def test_reclaim_takes_the_newest_single_lease_that_frees_enough():
    hs, holds = borrowed_cluster()
    current, result = decide(hs, holds, [asked("l4", 4, "lender")])
    assert current.leases["l4"].placement.start == NOW + 10 * H     # the wait reclaim saves
    assert victims(result) == ["b_new"]
    end = result.ends[0]
    assert (end.kind, end.at, end.for_lease, end.for_project) == ("reclaimed", DEADLINE, "l4", "lender")
    assert end.message == (
        "reclaimed: this lease borrows 4 A100 GPUs beyond its project's quota of 4, and a lease of "
        f"another project, within its own quota, would otherwise wait; it ends at {fmt_time(DEADLINE)}, "
        f"after a notice of 15 minutes, instead of {fmt_time(NOW + 10 * H)}; its data volume is kept")
    note = result.notes["l4"][-1]
    assert note.code == "reclaim" and f"end at {fmt_time(DEADLINE)}" in note.message


def test_reclaim_takes_the_fewest_leases():
    # 8 GPUs on one host: b_old alone (one lease) beats b_mid + b_new (two), though it is older.
    hs, holds = borrowed_cluster()
    _, result = decide(hs, holds, [asked("l8", 8, "lender")])
    assert victims(result) == ["b_old"]


def test_reclaim_takes_the_lowest_priority_first():
    hs = hosts("h1")
    holds = [held("hi", "h1", 4, "borrower", start=NOW - 2 * H, borrowing=True, priority=10),
             held("lo", "h1", 4, "borrower", start=NOW - 4 * H, borrowing=True, priority=-10)]
    _, result = decide(hs, holds, [asked("l4", 4, "lender")])
    assert victims(result) == ["lo"]


@pytest.mark.parametrize("ids", [("a", "z"), ("z", "a")])
def test_of_borrowers_started_the_same_second_the_one_asked_for_last_goes(ids):
    # not the one whose (random) lease id sorts first: the same history reclaims the same lease
    first, last = ids
    hs = hosts("h1")
    holds = [replace(held(first, "h1", 4, "borrower", start=NOW - 2 * H, borrowing=True), asked=(NOW - 3 * H, 7)),
             replace(held(last, "h1", 4, "borrower", start=NOW - 2 * H, borrowing=True), asked=(NOW - 3 * H, 9))]
    _, result = decide(hs, holds, [asked("l4", 4, "lender")])
    assert victims(result) == [last]


def test_reclaim_of_several_leases_when_no_single_one_will_do():
    hs = hosts("h1")
    holds = [held(f"b{i}", "h1", 2, "borrower", start=NOW - (5 - i) * H, borrowing=True) for i in range(4)]
    _, result = decide(hs, holds, [asked("l6", 6, "lender")])
    assert victims(result) == ["b1", "b2", "b3"]          # the three newest; b0 is spared


def test_reclaim_respects_minimum_runtime():
    hs = hosts("h1")
    holds = [held("young", "h1", 8, "borrower", start=NOW - 10 * 60, borrowing=True)]
    current, result = decide(hs, holds, [asked("l8", 8, "lender")])
    assert result.ends == []
    assert [r.message for r in result.notes["l8"]] == [
        f"another project is borrowing 8 A100 until {fmt_time(NOW + 10 * H)}; reclaim after "
        f"{fmt_time(NOW + 50 * 60)} (its minimum runtime of 1 hour)"]
    # 50 minutes on, the same lease is taken
    later = NOW + 50 * 60
    current = plan(later, hs, holds, QUOTAS, [asked("l8", 8, "lender")])
    result = early_ends(later, hs, holds, QUOTAS, [asked("l8", 8, "lender")], None, current, SETTINGS)
    assert victims(result) == ["young"] and result.ends[0].at == later + 15 * 60


def test_no_reclaim_for_a_short_wait():
    hs = hosts("h1")
    holds = [held("b", "h1", 8, "borrower", borrowing=True, end=NOW + 45 * 60)]
    _, result = decide(hs, holds, [asked("l8", 8, "lender")])
    assert result.ends == []
    assert "reclaim only for a wait over 1 hour; this one is 45 minutes" in result.notes["l8"][0].message


def test_no_reclaim_beyond_the_nominal_quota():
    # lender already holds 4 of its 8; asking for 8 more is beyond nominal: nothing is reclaimed
    hs = hosts("h1", "h2")
    holds = [held("own", "h2", 4, "lender"), held("b", "h1", 8, "borrower", borrowing=True)]
    _, result = decide(hs, holds, [asked("l8", 8, "lender")])
    assert result.ends == []


def test_a_reclaim_never_loops_back():
    """lender reclaims from borrower; then borrower, within its quota, waits for GPUs that
    lender is now borrowing: it must not reclaim them back."""
    quotas = {("lender", M): QuotaLimit("lender", M, 8, borrow_gpus=8),
              ("borrower", M): QuotaLimit("borrower", M, 8, borrow_gpus=8)}
    hs = hosts("h1", "h2")
    first = [held("b_own", "h2", 8, "borrower", start=NOW - 5 * H),
             held("b_borrow", "h1", 8, "borrower", start=NOW - 4 * H, borrowing=True)]
    _, step1 = decide(hs, first, [asked("l8", 8, "lender")], quotas)
    assert victims(step1) == ["b_borrow"]
    yielded = frozenset((e.project_id, e.for_project) for e in step1.ends)
    assert yielded == {("borrower", "lender")}
    # Hours later: lender's l8 runs on h1 and lender borrows h2 too (b_own ended); borrower asks again.
    later = NOW + 6 * H
    second = [held("l8", "h1", 8, "lender", start=NOW + 15 * 60, end=later + 8 * H),
              held("l_borrow", "h2", 8, "lender", start=later - 2 * H, end=later + 8 * H, borrowing=True)]
    waiting = [asked("b_again", 8, "borrower")]
    current = plan(later, hs, second, quotas, waiting)
    result = early_ends(later, hs, second, quotas, waiting, None, current, SETTINGS, yielded=yielded)
    assert result.ends == []
    assert result.notes["b_again"][0].message.endswith(
        "not reclaimed: this project yielded GPUs to that one earlier, and a reclaim never goes "
        "back the other way")
    # without that record, it would have reclaimed: the test shows the rule, not an accident
    assert victims(early_ends(later, hs, second, quotas, waiting, None, current, SETTINGS)) == ["l_borrow"]


def test_a_lease_under_notice_is_not_taken_twice():
    hs, holds = borrowed_cluster()
    _, result = decide(hs, holds, [asked("l4", 4, "lender")], takeable=frozenset({"b_old", "b_mid"}))
    assert victims(result) == ["b_mid"]


def test_two_waiting_leases_each_get_their_own_victims():
    hs, holds = borrowed_cluster()
    _, result = decide(hs, holds, [asked("first", 4, "lender", created=NOW - 200),
                                   asked("second", 4, "lender", created=NOW - 100)])
    assert {e.lease_id: e.for_lease for e in result.ends} == {"b_new": "first", "b_mid": "second"}


# -- priority classes: preemptible -------------------------------------------

def test_preemptible_runs_at_any_size_outside_quota_on_idle_capacity():
    quotas = {("tiny", M): QuotaLimit("tiny", M, 1)}
    hs = hosts("h1", "h2")
    p = plan(NOW, hs, [], quotas, [LeaseRequest("pre", "tiny", M, 8, 2, 4 * H, NOW, None, NOW, -100,
                                                preemptible=True)])
    assert p.leases["pre"].placement.start == NOW and not p.leases["pre"].borrowing
    # its holds take nothing from the project's quota: a normal lease of 1 still starts
    holds = [held("pre", h, 8, "tiny", start=NOW, preemptible=True) for h in ("h1",)]
    p = plan(NOW, hs, holds, quotas, [asked("n1", 1, "tiny")])
    assert p.leases["n1"].placement.start == NOW
    # when no GPUs are idle it says so in words
    full = [held("x", h, 8, "tiny", end=NOW + 2 * H) for h in ("h1", "h2")]
    p = plan(NOW, hs, full, quotas, [LeaseRequest("pre", "tiny", M, 8, 1, H, NOW, None, NOW, -100,
                                                  preemptible=True)])
    assert p.leases["pre"].placement.start == NOW + 2 * H
    assert p.leases["pre"].reasons[-1].message == (
        f"preemptible: runs only where 8 A100 GPUs are idle; earliest at {fmt_time(NOW + 2 * H)}")


def test_preemptible_is_ended_for_a_normal_lease_whatever_its_age():
    hs = hosts("h1")
    holds = [held("pre", "h1", 8, "borrower", start=NOW - 5 * 60, preemptible=True, priority=-100)]
    # the normal lease would wait 10 hours; the preemptible one ran only 5 minutes: ended anyway
    _, result = decide(hs, holds, [asked("n8", 8, "lender")])
    assert victims(result) == ["pre"]
    end = result.ends[0]
    assert end.kind == "preempted" and end.at == DEADLINE
    assert end.message == (f"preempted: a lease of another project needs 8 A100 GPUs, and this preemptible "
                           f"lease's 8 stand in its way; it ends at {fmt_time(DEADLINE)}, after a notice of 15 minutes, "
                           f"instead of {fmt_time(NOW + 10 * H)}; its data volume is kept")


def test_preemptible_goes_before_borrowing():
    hs = hosts("h1", "h2")
    holds = [held("pre", "h1", 8, "borrower", start=NOW - 5 * H, preemptible=True),
             held("bor", "h2", 8, "borrower", start=NOW - H * 2, borrowing=True)]
    _, result = decide(hs, holds, [asked("n8", 8, "lender")])
    assert victims(result) == ["pre"]


def test_a_preemptible_lease_is_never_a_beneficiary():
    hs = hosts("h1")
    holds = [held("bor", "h1", 8, "borrower", borrowing=True)]
    _, result = decide(hs, holds, [asked("p8", 8, "lender", preemptible=True, priority=-100)])
    assert result.ends == []


# -- budgets ------------------------------------------------------------------



def test_month_periods():
    a, z = budget.month_of(NOW)
    assert (fmt_time(a), fmt_time(z)) == ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")
    b = budget.Budget("b1", "p", M, 100, budget.MONTH)
    assert budget.periods(b, z - H, z + H) == [(a, z), budget.month_of(z)]


def test_budget_refuses_with_used_planned_and_left():
    b = budget.Budget("b1", "p", M, 100, budget.MONTH)
    spans = [budget.Span(4, NOW - 10 * H, NOW - 2 * H),     # 32 used
             budget.Span(2, NOW + H, NOW + 11 * H)]           # 20 planned -> 48 left
    assert budget.refusals([b], spans, budget.Span(8, NOW, NOW + 6 * H), NOW) == []          # 48: fits exactly
    assert budget.refusals([b], spans, budget.Span(8, NOW, NOW + 7 * H), NOW) == [
        "it needs 56 A100 GPU-hours in January 2027; project p's budget there is 100: 32 used, "
        "20 planned, 48 left"]


def test_an_early_end_gives_back_what_was_not_used():
    b = budget.Budget("b1", "p", M, 100, budget.MONTH)
    planned_run = budget.Span(8, NOW - 2 * H, NOW + 10 * H)        # 16 used, 80 planned
    u = budget.use(b, budget.month_of(NOW), [planned_run], NOW)
    assert (u.used, u.planned, u.left) == (16, 80, 4)
    cut = budget.Span(8, NOW - 2 * H, NOW)                         # ended now: the ledger cuts it
    u = budget.use(b, budget.month_of(NOW), [cut], NOW)
    assert (u.used, u.planned, u.left) == (16, 0, 84)


def test_a_custom_range_counts_only_its_part():
    b = budget.Budget("r", "p", M, 10, budget.RANGE, NOW, NOW + 5 * H)
    # 4 GPUs for 4 h from NOW+3h: 2 h (8 GPU-hours) fall in the range; fits under 10
    assert budget.refusals([b], [], budget.Span(4, NOW + 3 * H, NOW + 7 * H), NOW) == []
    assert budget.refusals([b], [], budget.Span(4, NOW + H, NOW + 7 * H), NOW)[0].startswith(
        "it needs 16 A100 GPU-hours in 2027-01-15T08:00:00Z to 2027-01-15T13:00:00Z; project p's budget there "
        "is 10: 0 used, 0 planned, 10 left")
    assert budget.refusals([b], [], budget.Span(4, NOW + 6 * H, NOW + 7 * H), NOW) == []   # outside


# -- extension windows ---------------------------------------------------------

def test_extension_window():
    end = NOW + 72 * H
    assert window_refusal(NOW, end, None) is None
    assert window_refusal(NOW, end, 48 * H) == (
        f"a lease may be extended only in its last 2 days; this one ends at {fmt_time(end)}, so ask from "
        f"{fmt_time(NOW + 24 * H)}")
    assert window_refusal(NOW + 24 * H, end, 48 * H) is None


def test_a_refused_extension_says_until_when_the_gpus_are_free():
    # h1: x (4 GPUs) ends in 1 h, y (4 GPUs) in 3 h; w needs all 8 and is planned at 3 h.
    hs = hosts("h1")
    holds = [held("x", "h1", 4, "p"), held("y", "h1", 4, "q", end=NOW + 3 * H)]
    holds[0] = held("x", "h1", 4, "p", end=NOW + H)
    quotas = {(p, M): QuotaLimit(p, M, 100) for p in ("p", "q", "r")}
    waiting = [LeaseRequest("w", "r", M, 8, 1, H, NOW, None, NOW - 60)]
    assert extension_conflicts(NOW, hs, holds, quotas, waiting, None, "x", NOW + 3 * H) == []
    assert extension_conflicts(NOW, hs, holds, quotas, waiting, None, "x", NOW + 4 * H) == [
        f"extending to {fmt_time(NOW + 4 * H)} would delay lease w (planned at {fmt_time(NOW + 3 * H)}, would "
        f"start at {fmt_time(NOW + 4 * H)}); the GPUs are free until {fmt_time(NOW + 3 * H)}"]

"""The engine's reclaim passes in the replay (engine/early_ends.py: replan, call_off_unneeded), as
GpuTenancy's decisions take them: whatif/reclaims.py keeps what the engine keeps in its rows (who
is under notice, for whom), these are the steps of a decision that read and change it.

- after a plan, `after_starts` reclaims with that plan's starts held, and plans again if it ended
  any lease early (`start_after_cut`);
- `pass_again` is the engine's next pass at an instant, with what the last one started held;
- in the engine's pass before an instant's arrivals, `before_arrivals` starts what its plan starts
  now and does the same on the leases waiting before them;
- `may_reclaim` says which running jobs a pass may end: not those this instant's creates started
  (scheduled, not running, for the engine's pass after them);
- before a decision plans and once it has started what it starts, `call_off` gives a job under
  notice whose lease no longer waits its own end back, where the extension conflicts with nothing;
- `reclaim_wake` and `no_pass` say when the engine asks again: a notice before each start a
  reclaim announces for later, and never at a wake-up only an earlier decision asked for.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from gpu_tenancy.domain.model import Hold, Plan
from gpu_tenancy.domain.planner import extension_conflicts, plan
from gpu_tenancy.whatif.kept_plans import KeptPlan

if TYPE_CHECKING:
    from gpu_tenancy.whatif.planner_sched import GpuTenancy


def may_reclaim(s: GpuTenancy, now: int, running, started=()) -> frozenset[str]:
    """The running jobs a decision now may end early (empty: none, so a plan of now decides
    only starts, and the decisions skipped or answered by a fit are the same without it).
    `started`: (job, hosts) started now by an engine's pass before this one, running for it."""
    rc = s.reclaims
    if rc is None or not s.borrowing:
        return frozenset()
    ends = {jid: st + job.duration for jid, (job, _hosts, st) in running.items()}
    ends.update((job.jid, now + job.duration) for job, _hosts in started)
    takeable = rc.takeable(ends, s.borrowing)
    if s.instant == now and s.scheduled:
        takeable -= s.scheduled   # (scheduled by this instant's creates: not running yet for the engine)
    deadline = now + rc.settings.notice
    return takeable if any(ends[jid] > deadline for jid in takeable) else frozenset()


def no_pass(s: GpuTenancy, now: int) -> bool:
    """The engine runs at arrivals, ends and the next instant its rows ask for (a queue ETA, a
    reclaim's decision), read after its last pass, and twice at each (before the arrivals and
    after; the second sees what the first started as running): a wake-up an earlier decision
    asked for and the last one did not is no pass, unless at that decision's instant. It
    matters with reclaims: a pass then could decide a reclaim (its borrower's minimum runtime
    run out) that the engine decides later. Nor is a wake-up at an instant whose passes were made
    already (an end, or the arrivals, came at the instant it asked for): the engine runs each
    instant's two passes once, and a third could decide what the engine decides later."""
    if s.events_since:
        return False
    return (now == s.instant and s.ticked) or (now != s.asked_wake and now != s.decided_at)


def reclaim(s: GpuTenancy, now: int, running, holds: list[Hold], asked, usage, p: Plan, takeable):
    """The engine's reclaim after plan `p` (early_ends.replan): borrowing jobs told to end at
    the notice's end. The holds then (theirs cut), whether any was, and the earliest start the
    reclaims announced for later (a wake-up: the engine's queue ETA)."""
    rc = s.reclaims
    assert rc is not None and s.hosts is not None
    decided = rc.decide(now, s.hosts, holds, s.quotas, asked, usage, p, takeable, s.settings)
    if decided.ends:
        for end in decided.ends:
            s.holds[end.lease_id] = rc.cut(end.lease_id, s.holds[end.lease_id])
        cut = {end.lease_id for end in decided.ends}
        holds = [c for h in holds for c in (rc.cut(h.lease_id, [h]) if h.lease_id in cut else (h,))]
        s.last_plan = s.book = None   # made with the holds before the cut
        if s.earlier is not None:
            s.earlier.moved()
    s.announced = dict(decided.etas)   # each replan writes every queue ETA: the last one's stand
    return holds, bool(decided.ends), reclaim_wake(s, now, decided.etas.values())


def reclaim_wake(s: GpuTenancy, now: int, announced) -> int | None:
    """When to ask again for the starts reclaims announce for later: a notice before each (the
    instant the engine can decide that reclaim, its borrower's minimum runtime run out; the
    engine's runner looks every few seconds), and once that has passed, the start itself
    (the lease's queue ETA). bench/engine_replay.py asks the engine at the same instants."""
    notice = s.reclaims.settings.notice if s.reclaims is not None else 0
    return min((a - notice if a - notice > now else a for a in announced), default=None)


def after_starts(s: GpuTenancy, now: int, running, cluster, holds: list[Hold], starts, usage, p: Plan,
                 takeable, wake):
    """The rest of the engine's pass whose plan `p` started `starts` (early_ends.replan): the
    reclaim reads those as holds, no longer waiting, and if it ends any lease early the plan is
    made again, and what that one starts now is started too. More starts, the earliest planned
    start, the earliest start announced for a later reclaim, and the holds then (every start
    held, the ends cut)."""
    holds = holds + s._held_from_now(starts, cluster, now)
    waiting = [s.requests[jid] for jid in s.waiting]
    holds, cut, later = reclaim(s, now, running, holds, waiting, usage, p, takeable)
    more: list = []
    if cut and waiting:
        more, wake, holds = start_after_cut(s, now, cluster, holds, waiting, usage)
    return more, wake, later, holds


def start_after_cut(s: GpuTenancy, now: int, cluster, holds: list[Hold], waiting, usage
                    ) -> tuple[list, int | None, list[Hold]]:
    """The engine's plan again once its pass ended a lease early (ledger.replan): it starts what
    it starts now. Those starts, the earliest start it plans after now, and the holds with them."""
    assert s.hosts is not None
    p = plan(now, s.hosts, holds, s.quotas, waiting, usage, s.settings, explain=False)
    s.plans += 1
    # the engine writes a start a reclaim announces only where it is earlier than this plan's
    # (early_ends.replan_locked): where it is not, the lease's row keeps the plan's start and hosts
    planned = {jid: pl.eta for jid, pl in p.leases.items()}
    s.announced = {jid: at for jid, at in s.announced.items()
                   if (eta := planned.get(jid)) is None or at < eta}
    more, wake, _ = s._start_now(p, now, cluster)
    return more, wake, holds + s._held_from_now(more, cluster, now)


def pass_again(s: GpuTenancy, now: int, running, cluster, held_now: list[Hold], started, usage, tick_again: bool,
               reclaim_wake: int | None) -> tuple[list, int | None, int | None]:
    """The engine's next pass at this instant, with what this one started (`started`) held in
    `held_now`: a lease before those in the order may be placed elsewhere, and a borrower, which
    may start only on capacity idle from now to its end, may find that now (bench/engine_replay.py
    --jobs 600 --hosts 8 --quota quota: p026121). `tick_again`: it is the engine's second tick at an
    instant of ends or a wake-up, whose reclaim reads what the first one started as running (the
    leases examined, and the borrowers a later reclaim may take, are others) and writes the queue's
    ETAs again. What it starts, its earliest planned start, and the wake-up for the starts the
    reclaims announce for later (`reclaim_wake` unless this pass reclaims)."""
    assert s.hosts is not None
    again = plan(now, s.hosts, held_now, s.quotas, [s.requests[j] for j in s.waiting], usage, s.settings,
                 explain=False)
    s.plans += 1
    first_plan = s.last_plan
    more, wake, s.last_in_order = s._start_now(again, now, cluster)
    recut = False
    if tick_again:
        takeable = may_reclaim(s, now, running, started)
        if takeable:
            assert s.reclaims is not None
            cuts_before = len(s.reclaims.cuts)
            after, wake, reclaim_wake, _held = after_starts(
                s, now, running, cluster, held_now, more, usage, again, takeable, wake)
            more += after
            recut = len(s.reclaims.cuts) > cuts_before
        else:   # its plan writes the queue's ETAs again, and nothing is announced for later
            reclaim_wake, s.announced = None, {}
    # (after a cut, the plan after_starts made again is the rows': not kept)
    s.last_plan = KeptPlan(again, s._scores(usage), s._kept_order(again)) if s._fits() and not recut else None
    if s.arrival_next and first_plan is not None and s.last_plan is not None:
        # an arrival follows at this instant: its create fits into the rows this pass wrote
        # (the engine's next pass, this one, comes after the creates), not into this plan
        first_plan.stale = True
        s.last_plan = first_plan
    s.book = None
    return more, wake, reclaim_wake


def before_arrivals(s: GpuTenancy, now: int, running, holds: list[Hold], usage, takeable, cluster):
    """The engine's pass at this instant before the arrivals' requests (it runs at every event,
    and the API then fits each arrival into the plan as that pass left it): what it starts, held
    before the arrivals are planned (with time alone the fair-share order moves, and capacity idle
    from now to a borrower's end appears), and the reclaims it decides for the leases waiting
    before them. The holds then, and what it started."""
    before = [s.requests[jid] for jid in s.waiting if jid not in s.unplanned]
    if not before:
        return holds, []
    assert s.hosts is not None
    p0 = plan(now, s.hosts, holds, s.quotas, before, usage, s.settings, explain=False)
    s.plans += 1
    first, _wake, _in_order = s._start_now(p0, now, cluster)
    holds = holds + s._held_from_now(first, cluster, now)
    rest = [lr for lr in before if lr.lease_id in s.waiting]
    cut = False
    if takeable:
        holds, cut, _later = reclaim(s, now, running, holds, rest, usage, p0, takeable)
    if cut and rest:
        # what that pass's plan after the reclaim starts now starts before the arrivals are
        # asked for: a borrower may find capacity idle from now to its end once a reservation
        # moved onto the GPUs the reclaim frees
        more, _wake, holds = start_after_cut(s, now, cluster, holds, rest, usage)
        first += more
    elif s._fits():
        s.last_plan, s.book = KeptPlan(p0, s._scores(usage), s._kept_order(p0)), None   # the rows the creates read
    if s.reclaims is not None and s.reclaims.noticed_for:   # the engine's pass ends with it
        called = call_off(s, now, running, cluster, holds,
                          [j for j in s.waiting if j not in s.unplanned])
        holds = holds if called is None else called
    return holds, first


def call_off(s: GpuTenancy, now: int, running, cluster, holds: list[Hold] | None = None,
             waiting: Collection[str] | None = None) -> list[Hold] | None:
    """The engine's call_off_unneeded (engine/early_ends.py), before a pass plans and once it has
    started what it starts: a job under notice whose lease no longer waits gets its own end back,
    unless that end delays a waiting lease (or over-commits, or breaks a quota). `holds`: every
    hold now (None: the running jobs'); `waiting`: the leases waiting (None: s.waiting). The
    holds then, if any notice was called off (None: none was)."""
    rc = s.reclaims
    assert rc is not None
    waiting = s.waiting if waiting is None else waiting
    victims = rc.unneeded(waiting, {jid: job.arrival for jid, (job, _h, _s) in running.items()})
    if not victims:
        return None
    assert s.hosts is not None   # (a notice was decided by a plan)
    if holds is None:
        holds = s._holds_after(running, (), now, cluster)
    asked = [s.requests[jid] for jid in waiting]
    usage = s.usage(now, running) if s.fairshare else None
    called = False
    for jid in victims:
        job, hosts, st = running[jid]
        if extension_conflicts(now, s.hosts, holds, s.quotas, asked, usage, jid, st + job.duration, s.settings):
            continue   # its GPUs are promised again: the notice stands
        rc.call_off(jid)
        del s.holds[jid]
        holds = [h for h in holds if h.lease_id != jid] + s._running_holds(job, hosts, st, now, cluster)
        called = True
    if not called:
        return None
    s.last_plan = s.book = s.reusable = None   # the plans kept were made with its end cut
    s.settled = False
    if s.earlier is not None:
        s.earlier.moved()
    return holds

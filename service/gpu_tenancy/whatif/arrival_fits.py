"""Arrivals told the ETA of a fit into the plan, as the service's create tells it
(engine/plan_insert.py): the plan fitted into is the engine's last full plan, kept while no job
ended and the fair-share order stood (whatif/kept_plans.py), with the fits made into it since.
"""
from __future__ import annotations

import time
from itertools import islice
from typing import TYPE_CHECKING

from gpu_tenancy.domain.lazy_plan import LazyPlan
from gpu_tenancy.domain.model import Hold
from gpu_tenancy.domain.plan_insert import Planned, PlanBook
from gpu_tenancy.domain.planner import plan
from gpu_tenancy.whatif.kept_plans import FittedBook, KeptPlan, keeps_order

if TYPE_CHECKING:
    from gpu_tenancy.whatif.planner_sched import GpuTenancy


def fit_arrivals(s: GpuTenancy, now: int, running, holds: list[Hold], usage, may_plan: bool
                 ) -> tuple[dict[str, int | None], bool] | None:
    """The arrivals not yet planned fitted into the current plan, as the service's create
    fits them (engine/plan_insert.py): jid -> the ETA the fit tells, and whether the plan
    with them is still plan()'s (every fit went last in the planner's order). The plan
    fitted into is the engine's: its full plan of the leases waiting before them (the last
    full plan here while no job ended and the fair-share order stood; with `may_plan` and
    at least insert_min_waiting planned, otherwise made now), with the fits made
    since, unless one went out of order at an earlier instant (the engine replanned since).
    None: nothing kept to fit into, or a fit would start now (the service's create then
    replans in full): this decision's full plan tells the ETA, as before."""
    if not s.unplanned or not s._fits() or s.hosts is None:
        return None
    k = len(s.unplanned)
    new = list(islice(reversed(s.waiting), k))[::-1]   # submitted last: none planned yet
    if set(new) != s.unplanned or len(s.waiting) - k < (s.insert_min_waiting or 0):
        return None   # (a fit below that costs more than the plans it saves)
    if s.awaiting_reclaim:
        return None   # the service's create replans in full (a lease waits for a reclaim announced)
    t = time.perf_counter()
    scores = s._scores(usage)
    # (only when there is a plan to fit into: a plan made here is in the order of now)
    order = s._charged_order(now, holds, scores) if s.book or s.last_plan else None
    b = s.book
    if b is not None and (not s._same_order(b.scores, scores) or not keeps_order(b.order, order)
                          or (not b.exact and now > b.fitted_at)):
        b = s.book = None
    if b is None:
        old = [s.requests[jid] for jid in islice(s.waiting, len(s.waiting) - k)]
        kept = s.last_plan
        if (kept is None or not s._same_order(kept.scores, scores) or not keeps_order(kept.order, order)
                or not all(lr.lease_id in leases for leases in (kept.plan.leases,) for lr in old)):
            if not may_plan:
                return None   # this decision's full plan tells the ETA
            made = (LazyPlan(now, s.hosts, holds, s.quotas, old, usage, s.settings,
                             earlier=s._head(now, running)) if s.lazy
                    else plan(now, s.hosts, holds, s.quotas, old, usage, s.settings, explain=False))
            s._made(made)
            kept = KeptPlan(made, scores, s._kept_order(made))
            s.plans += 1
            s.eta_plans += 1
        # the plan's own state, its reservations made, is the book (no rebuild) while the holds are
        # the plan's: none is held past its asked end (held to a second after each decision), and the
        # leases the plan started hold what it reserved for them (no release allowance, which a plan
        # adds and the replay's holds do not); jobs leave only by ending (finished() drops the plan)
        same_holds = s.settings.release_allowance == 0 and all(h.end > now + 1 for h in holds)
        run = kept.run() if same_holds else None
        if run is not None:
            book = PlanBook.of_run(run, s.quotas, old, usage, s.settings, holds)
        else:
            planned = [Planned(lr, pl.placement, pl.borrowing) for lr in old
                       for pl in (kept.plan.leases[lr.lease_id],)]
            book = PlanBook(now, s.hosts, holds, s.quotas, planned, usage, s.settings)
        b = FittedBook(book, now, scores, order, dict(kept.plan.leases))
        if kept.stale:
            for jid in new:   # not the plan of now: the fits are not plan()'s either
                book.exact[s.requests[jid].gpu_model] = False
    s.last_plan, s.book = None, b   # the book holds the plan and the fits from now on
    fitted: dict[str, int | None] = {}
    for jid in new:
        lr = s.requests[jid]
        ins = b.book.insert(now, lr)
        place = ins.planned.placement
        if place is None or place.start <= now or place.start == lr.earliest_start:
            s.book = None   # the service's create replans in full then (it commits GPUs, or finds room)
            s.fit_refused = True   # and tells that replan's ETA: no other fit is made for it
            s.plan_seconds += time.perf_counter() - t
            return None
        fitted[jid] = place.start
        b.exact, b.fitted_at = ins.exact, now
        b.leases[jid] = ins.planned
    if s.settings.queued_charge is not None:
        # the book's order keys carry the charges as of its making: exact only if the fits went
        # last in the order of now too (else this decision's full plan is made, as for any other)
        now_order = order or s._charged_order(now, holds, scores) or ()
        b.exact = b.exact and now_order[len(now_order) - len(new):] == tuple(new)
        b.order = now_order   # (the waiting leases are the book's now)
    s.plan_seconds += time.perf_counter() - t
    return fitted, b.exact

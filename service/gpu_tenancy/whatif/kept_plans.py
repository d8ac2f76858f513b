"""The plans the replay keeps between its decisions, as the service keeps them: the last full
plan (KeptPlan), and the book arrivals are fitted into (FittedBook), each with what it was
made with, so that planner_sched can tell whether it still stands for a full plan of now."""
from __future__ import annotations

from gpu_tenancy.domain.lazy_plan import LazyPlan
from gpu_tenancy.domain.model import Plan, PlannedLease
from gpu_tenancy.domain.plan_insert import PlanBook
from gpu_tenancy.domain.plan_run import PlanRun


def order_of(p: Plan | LazyPlan) -> tuple[str, ...]:
    """The plan's leases in its planner order (a whole plan's are kept in it)."""
    if isinstance(p, LazyPlan):
        return tuple(lr.lease_id for lr in p.planning.ordered)
    return tuple(p.leases)


def only_among(order: tuple[str, ...] | None, among: tuple[str, ...] | None) -> tuple[str, ...]:
    """`order`'s leases that are among `among`, in `order`'s order."""
    if order is None or among is None:
        return ()
    keep = set(among)
    return tuple(x for x in order if x in keep)


def keeps_order(then: tuple[str, ...] | None, now: tuple[str, ...] | None) -> bool:
    """The leases of both orders (the queued charge's: GpuTenancy._charged_order) are in the same order in
    each: a plan made in `then`'s order is the plan made now. True with the rule off (None)."""
    return then is None or now is None or only_among(then, now) == only_among(now, then)


class KeptPlan:
    """A full plan of the replay (a lazy one planned to its end when read), and the tenants'
    fair-share scores it was made with (and with the queued charge, the leases' order)."""

    def __init__(self, p: Plan | LazyPlan, scores: dict[str, float], order: tuple[str, ...] | None = None):
        self._plan, self.scores, self.order = p, scores, order
        self._lazy: LazyPlan | None = None
        # the plan of a pass that started leases out of order, kept for the creates of the arrivals
        # that follow at its instant (the engine's rows until its next pass): not a plan of now
        self.stale = False

    @property
    def plan(self) -> Plan:
        return self.finish()

    def finish(self) -> Plan:
        """The whole plan: a lazy one is planned to its end (once), its state kept for run()."""
        if not isinstance(self._plan, Plan):
            self._lazy, self._plan = self._plan, self._plan.finish()
        return self._plan

    def run(self) -> PlanRun | None:
        """The state of the whole plan once every lease is reserved (None: kept as a Plan only).
        Taken once: a PlanBook goes on from it."""
        self.finish()
        lazy, self._lazy = self._lazy, None
        return lazy.planning.run if lazy is not None else None


class FittedBook:
    """The plan arrivals are fitted into (a PlanBook), as one API process keeps it, and its leases'
    places in the planner's order (the plan's, then each fit while every fit went last)."""

    def __init__(self, book: PlanBook, made_at: int, scores: dict[str, float], order: tuple[str, ...] | None = None,
                 leases: dict[str, PlannedLease] | None = None):
        self.book, self.made_at, self.scores, self.order = book, made_at, scores, order
        self.exact = True    # every fit so far went last in the planner's order
        self.fitted_at = made_at
        self.leases: dict[str, PlannedLease] = leases if leases is not None else {}

    @property
    def plan(self) -> FittedBook:
        """Read as a plan (its `leases`): while exact, the full plan with the fits."""
        return self

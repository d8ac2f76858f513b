"""A plan made only as far as a decision needs it: which leases start now, the ETAs of the
leases just asked for, and the next planned start; the rest of the order is planned only
when someone reads the whole plan.

The leases it plans are placed as plan() places them: the same steps in the same order, it
only stops early. It stops once no lease left can start now: the most GPUs free now on one
host (of any model) is below the fewest GPUs per VM any lease left asks for. Free GPUs only
go down as leases are reserved, and a borrowed or preemptible start needs them free now too.

The next planned start after now is the whole plan's as well: none of the leases left starts
before the earliest start one VM of its shape could have on the capacity left (_earliest_left),
so while the earliest start planned so far is no later than that, it is the earliest of all.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from .model import Hold, Host, LeaseRequest, Plan, QuotaLimit
from .plan_prefix import EarlierPlan
from .planner import Planning, PlannerSettings
from .profile import INF


class LazyPlan:
    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
                 usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings,
                 explain: bool = False, earlier: Callable[[], EarlierPlan | None] | None = None):
        if settings.keep_etas:   # its rounds read whole plans
            raise ValueError("a lazy plan does not keep ETAs")
        self.planning = Planning(now, hosts, holds, quotas, waiting, usage, settings, explain, earlier=earlier)
        self.now = now

    @property
    def plan(self) -> Plan:
        """The whole plan (planned to the end now if it was not yet)."""
        return self.finish()

    def finish(self) -> Plan:
        """Plan the leases not planned yet, and return the whole plan."""
        self.planning.advance()
        return self.planning.plan

    def decide(self, told: Collection[str]) -> tuple[Plan, int | None]:
        """The plan as far as needed for its starts now, the ETAs of the leases `told` and the
        earliest planned start after now (returned beside it; None: no lease planned later)."""
        pg = self.planning
        ordered = pg.ordered
        n = len(ordered)
        last_told = max((i for i, lr in enumerate(ordered) if lr.lease_id in told), default=-1)
        fewest = [0] * (n + 1)   # fewest[i]: the fewest GPUs per VM among ordered[i:]
        fewest[n] = INF
        for i in range(n - 1, -1, -1):
            g = ordered[i].gpus_per_vm
            fewest[i] = g if g < fewest[i + 1] else fewest[i + 1]
        indexes = list(pg.run.indexes.values())

        def none_starts_now(i: int) -> bool:
            return i > last_told and max((mi.largest_free_now() for mi in indexes), default=0) < fewest[i]

        pg.advance(none_starts_now)
        rise = _earliest_left(pg, self.now)
        now, leases = self.now, pg.plan.leases
        nxt = _next_start(pg.plan, now)

        def earliest_known(i: int) -> bool:   # (asked before the i-th: the one before it is planned)
            nonlocal nxt
            pl = leases[ordered[i - 1].lease_id] if i else None
            if pl is not None and pl.placement is not None and now < pl.placement.start and (nxt is None or pl.placement.start < nxt):
                nxt = pl.placement.start
            return nxt is not None and nxt <= rise
        if nxt is None or nxt > rise:   # the next leases may start earlier
            pg.advance(earliest_known)
            if pg.finished and n:
                earliest_known(n)   # the last lease's start read too: nxt is the whole plan's
        return pg.plan, nxt


def _next_start(p: Plan, now: int) -> int | None:
    return min((pl.placement.start for pl in p.leases.values()
                if pl.placement is not None and pl.placement.start > now), default=None)


def _earliest_left(pg: Planning, now: int) -> int:
    """No lease not planned yet starts before this: for each GPU model and GPUs per VM among
    them, the earliest start of one VM for the shortest of their durations, on the capacity
    left now (each lease's own start is no earlier: it is longer, or a gang, or waits for its
    quota, or for the leases planned before it, which only take GPUs)."""
    shortest: dict[tuple[str, int], int] = {}
    for lr in pg.ordered[pg.done:]:
        key = (lr.gpu_model, lr.gpus_per_vm)
        d = lr.duration + pg.settings.release_allowance
        if d < shortest.get(key, INF):
            shortest[key] = d
    first = INF
    for (m, g), d in shortest.items():
        mi = pg.run.indexes.get(m)
        r = mi.earliest(now, d, g) if mi is not None else None
        if r is not None and r[0] < first:
            first = r[0]
    return first

"""The replay's last plan, and how far a plan of now would place its leases as it did
(domain/plan_prefix.py takes that head over; only the leases after it are searched for).

Since the last plan, with quotas that never bind (the trace replay's), a plan of now sees:
- jobs that ended at the end they held: nothing (the plan counted their GPUs free from then);
- jobs that started where the plan had them, as holds: the same as its reservations, for the
  leases after them in its order. A lease before one of them in the order was placed without
  it; it is placed the same while its start is after that job's end: its search meets the
  hosts' free GPUs from its start on only (the same, so the same runs start there, with the
  same GPUs free), and before its start nothing fitted it then and less fits now;
- leases that arrived since: they come in the order where they come (the head stops there);
- a fair-share order that moved: likewise;
- a lease the plan placed that a plan of now does not have and that did not start (the arrivals
  an arrival's fit plan leaves out): the leases after it saw it reserved, and the head stops there.
Anything else (a job that ended early or started elsewhere, a hold past its end) and the
head is not read: the plan is made whole, as before.
"""
from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence

from gpu_tenancy.domain.model import Hold, LeaseRequest, Placement, PlannedLease
from gpu_tenancy.domain.plan_prefix import EarlierPlan
from gpu_tenancy.domain.planner import Planning


class EarlierPlans:
    def __init__(self) -> None:
        self.planning: Planning | None = None   # the last plan made (as far as it is planned)
        self.since: list[tuple[str, int]] = []  # the jobs started since it: (jid, the end of its hold)
        self.held: dict[str, tuple[Placement, list[Hold]]] = {}   # each placement's holds, made once
        self.placed_before = 0   # leases placed from an earlier plan's head by the plans before the last

    def made(self, planning: Planning | None) -> None:
        """A plan was made (None: one whose head is not read, such as a whole plan())."""
        if self.planning is not None:
            self.placed_before += self.planning.taken
        self.planning, self.since = planning, []

    @property
    def taken(self) -> int:
        """Leases placed from an earlier plan's head: the searches saved."""
        return self.placed_before + (self.planning.taken if self.planning is not None else 0)

    def started(self, jid: str, start: int, hosts: tuple[str, ...], end: int) -> None:
        self.held.pop(jid, None)   # (no longer waiting: no plan places it again)
        pg = self.planning
        if pg is None:
            return
        pl = pg.plan.leases.get(jid)
        if pl is not None and (pl.placement is None or pl.placement.start != start or pl.placement.hosts != hosts):
            self.planning = None   # not where the plan had it: the leases after it saw it there
            return
        self.since.append((jid, end))

    def moved(self) -> None:
        """GPUs came free before the plan counted on them (a job ended early or was cut)."""
        self.planning = None

    def head(self) -> Callable[[], EarlierPlan | None] | None:
        """The last plan's leases in its order up to the first one a job started since may have
        moved (a job after it in the order, or not in it, whose hold ends at or after its start);
        worked out when a plan made now asks for it (planned on to the end), as things are now."""
        pg = self.planning
        if pg is None:
            return None
        # (what it reads, not the plan itself: a plan never planned on would keep the one before alive)
        ordered, leases, done, since, held = pg.ordered, pg.plan.leases, pg.done, self.since, self.held
        return lambda: _head(ordered, leases, done, since, held)


def _head(ordered: Sequence[LeaseRequest], leases: Mapping[str, PlannedLease], done: int,
          since: list[tuple[str, int]], held: dict[str, tuple[Placement, list[Hold]]]) -> EarlierPlan:
    ids = [lr.lease_id for lr in ordered[:done]]
    n = len(ids)
    # latest[i]: the latest end of a job started since at position i or later (n: not in the plan)
    latest = [-1] * (n + 1)
    started: Container[str] = frozenset()
    if since:
        where = {jid: i for i, jid in enumerate(ids)}
        for jid, end in since:
            i = where.get(jid, n)
            if end > latest[i]:
                latest[i] = end
        for i in range(n - 1, -1, -1):
            if latest[i + 1] > latest[i]:
                latest[i] = latest[i + 1]
        started = {jid for jid, _ in since}
    cut = n
    for i, jid in enumerate(ids):
        if jid not in started:
            place = leases[jid].placement
            if place is not None and place.start <= latest[i + 1]:
                cut = i
                break
    return EarlierPlan(ids[:cut], leases, started, held)

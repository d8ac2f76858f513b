"""An earlier plan's leases taken over, as far as a plan of now would place them again.

A plan places its leases one after another in the planner's order, each on what the holds
and the leases before it left. When a caller knows that, since an earlier plan, nothing
changed that a plan of now would see before some point of its order (the replay: jobs ended
at the ends they held, jobs started where that plan had them and ended before the starts of
the leases they came after in its order, the quotas never bind), the leases up to there are
placed where that plan had them, and are reserved at once, as holds, in the index the plan
builds: only the leases after them are searched for. `common_prefix` finds how far that goes;
the caller answers for the changes it knows of by leaving out of `EarlierPlan.order` every
lease from the first one those changes may move.
"""
from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

from .model import Hold, LeaseRequest, Placement, PlannedLease


@dataclass(frozen=True)
class EarlierPlan:
    """An earlier plan: its leases in its planner order, as far as the caller vouches that a plan
    of now places them as it did, and where it placed them (`placements` may hold more); `started`:
    those of its leases that hold their placement now (started there since).
    `held`: each placement's holds, kept by the caller from plan to plan (made once per placement)."""
    order: Sequence[str]
    placements: Mapping[str, PlannedLease]
    started: Container[str] = ()
    held: dict[str, tuple[Placement, list[Hold]]] = field(default_factory=dict)

    def holds(self, lr: LeaseRequest, allowance: int) -> list[Hold]:
        """The holds of lr's placement in this plan (what planner.plan reserves for it)."""
        pl = self.placements[lr.lease_id]
        known = self.held.get(lr.lease_id)
        if known is not None and known[0] is pl.placement:
            return known[1]
        out = placement_holds(lr, pl.placement, pl.borrowing, allowance)
        if pl.placement is not None:
            self.held[lr.lease_id] = (pl.placement, out)
        return out


def common_prefix(ordered: Sequence[LeaseRequest], earlier: EarlierPlan, now: int) -> int:
    """How many of `ordered` (a plan of now's order) come in the same order at the head of
    `earlier.order`, with none but leases started since between them (holds now, where that plan
    reserved them), each placed there at or after now. An earlier lease neither among `ordered`
    nor started was reserved there and is not now: the leases after it may move."""
    waiting = {lr.lease_id for lr in ordered}
    order, placements, started = earlier.order, earlier.placements, earlier.started
    j, n = 0, len(order)
    for i, lr in enumerate(ordered):
        while j < n and order[j] not in waiting:
            if order[j] not in started:
                return i
            j += 1
        if j == n or order[j] != lr.lease_id:
            return i
        place = placements[lr.lease_id].placement
        if place is None or place.start < now:   # (nowhere: why is not kept; passed: it would start now)
            return i
        j += 1
    return len(ordered)


def placement_holds(lr: LeaseRequest, place: Placement | None, borrowing: bool, allowance: int) -> list[Hold]:
    """A placement as holds, one per VM: what planner.plan reserves for it."""
    if place is None:
        return []
    return [Hold(lr.lease_id, lr.project_id, host, lr.gpu_model, lr.gpus_per_vm, place.start, place.end + allowance,
                 borrowing, lr.preemptible, lr.priority, allowance) for host in place.hosts]

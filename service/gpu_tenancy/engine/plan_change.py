"""A waiting lease's new duration, made to the current plan rather than by a full replan under the
ledger lock, which at 5,000 waiting leases took 0.4 s of CPU and held every other project's
creates for 0.7 s per PATCH. See docs/design.md, "Incremental change".

A shorter lease keeps its place, ending earlier: the plan stays valid (it only frees GPUs and
quota). A longer one is placed again, as a create is fitted in (engine/plan_insert.py), around
every other lease and its own last place, which stays reserved in this process's copy of the plan
until it is built again: valid, perhaps later than a full plan would start it. Either way the
lease claims a plan number, as a fit does, so that every process's copy learns of its new place
(PlanBook.changed), its reasons say its place is provisional (which is how a copy built from the
rows knows the plan is no longer the full plan: plan_insert.INEXACT), and the engine's replan,
which the PATCH wakes, moves it and the others where the full plan has them."""
from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.model import Placement, PlannedLease, Reason
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import ledger, plan_insert, plan_remove, start_by_margins

S = LeaseState

SHORTENED = Reason("provisional", "shortened where it was planned: the next full plan, within seconds, may start "
                                  "it or the leases behind it earlier")


def new_duration(session: Session, now: int, settings: PlannerSettings, row: m.Lease, old_duration: int,
                 fits: plan_insert.InsertCache | None) -> bool:
    """Under the ledger lock (taken here), in the PATCH's transaction, queued `row` with its new
    duration set: whether its place was changed in the plan as it stands (its queue information
    written); False: the change needs a full replan (plan_remove.without_replan says where; and
    where the lease is not in the plan, would start now or exactly when asked, which commits
    GPUs, or finds no room after every lease of the plan)."""
    if (S(row.status) is not S.QUEUED or row.queue_position is None or row.start_at is None
            or not row.planned_hosts or settings.queued_charge is not None
            or not plan_remove.without_replan(session, settings, row, fits)):
        return False
    assert fits is not None   # without_replan says no without a plan
    if row.duration < old_duration:
        return shortened(session, now, row)
    return lengthened(session, now, settings, row, fits)


def shortened(session: Session, now: int, row: m.Lease) -> bool:
    start, position = to_epoch(row.start_at), row.queue_position
    assert start is not None and position is not None   # new_duration: the lease is in the plan
    if start <= now or start == to_epoch(row.earliest_start):   # the full replan commits it
        return False
    _, seq, _ = plan_insert.claim(session)
    place = Placement(start, start + row.duration, tuple(row.planned_hosts or ()))
    planned = PlannedLease(row.id, position, place,
                           [*(Reason(r["code"], r["message"]) for r in row.queue_reasons or []
                              if r["code"] != "provisional"), SHORTENED])
    ledger.write_queue_info(row, planned, now, start_by_margins.basis_now(session, row.project_id),
                            bool(row.eta_guarded))
    row.plan_seq = seq   # a copy of the plan that holds the lease keeps its longer place: PlanBook.changed
    return True


def lengthened(session: Session, now: int, settings: PlannerSettings, row: m.Lease,
               fits: plan_insert.InsertCache) -> bool:
    """Placed again in this process's copy of the plan, caught up with the fits committed
    meanwhile under the lock, as plan_insert.fit_made does; the copy is confirmed once the PATCH
    has committed (dropped if it does not: built again at the next create)."""
    snapshot, fits.last = fits.last, None
    generation, inserted = session.execute(plan_insert.COUNTS).one()
    snapshot = plan_insert.catch_up(session, now, settings, fits, snapshot, generation, inserted)
    if snapshot is None:
        return False
    generation, seq, recent = plan_insert.claim(session)
    snapshot = plan_insert.catch_up(session, now, settings, fits, snapshot, generation, seq - 1,
                                    recent.since(snapshot.inserted, seq - 1))
    if snapshot is None or not snapshot.book.holds(row.id):
        return False
    lr = ledger.request_from_row(row)
    fitted = snapshot.book.refit(now, lr)
    place = fitted.planned.placement
    if place is None or place.start <= now or place.start == lr.earliest_start:
        return False
    ledger.write_queue_info(row, fitted.planned, now, start_by_margins.basis_now(session, row.project_id),
                            bool(row.eta_guarded))
    row.plan_seq = snapshot.inserted = seq
    event.listen(session, "after_commit", lambda _: fits.confirm(snapshot), once=True)
    return True

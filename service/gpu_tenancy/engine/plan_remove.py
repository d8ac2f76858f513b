"""A waiting lease cancelled while the queue is long: taken out of the current plan instead of a
full replan under the ledger lock, which at 10,000 waiting leases held every other project's
creates and the engine for most of a second per cancel. See docs/design.md, "Incremental cancel".

The plan lives in the rows (engine/plan_insert.py). A cancelled lease is no longer queued, so a
plan built from them leaves it out; the other leases keep the starts and hosts the plan gave
them, and those stay valid: each was placed around what the plan held, and taking a lease out
only frees GPUs and quota. The full plan may start the leases behind it earlier: the engine's
replan (woken by the cancel) moves them. A process's copy of the plan built before the cancel
learns of it as it learns of fits, by number: the cancel claims one as a fit does (the ledger's
`inserted` count) and writes it as the lease's `plan_seq`; the copy keeps the lease's place
reserved (freeing GPUs its index has taken is not one of its steps; kept, they only stay unused
until the copy is built again, after the next replan). Either way the GPU model's plan is no
longer the full plan (domain/plan_insert.py: PlanBook.taken_out)."""
from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.states import WAITING, LeaseState
from gpu_tenancy.engine import plan_insert

S = LeaseState
L = m.Lease

# a running lease under notice of an early end for this one: the full replan calls it off at once
NOTICED = select(L.id).where(L.early_end_for == bindparam("lease"), L.status == S.ACTIVE.value).limit(1)
# how many leases the plan holds, counted up to `most` (the queue may be 10,000 long)
PLANNED = select(func.count()).select_from(
    select(L.id).where(L.status == S.QUEUED.value, L.queue_position.is_not(None)).limit(bindparam("most")).subquery())


def take_out(session: Session, settings: PlannerSettings, row: m.Lease,
             fits: plan_insert.InsertCache | None) -> bool:
    """Under the ledger lock, in the cancel's transaction, `row` still waiting (before its
    transition): whether the cancel may leave the plan as it is but for this lease, its number
    claimed; False: the cancel replans in full, as before (see without_replan)."""
    if S(row.status) not in WAITING or not without_replan(session, settings, row, fits):
        return False
    if row.queue_position is not None:   # in the plan (a lease no replan has planned yet is in none)
        _, seq, _ = plan_insert.claim(session)
        row.plan_seq = seq
    return True


def without_replan(session: Session, settings: PlannerSettings, row: m.Lease,
                   fits: plan_insert.InsertCache | None) -> bool:
    """Whether a change to waiting `row` (a cancel, a new duration: engine/plan_change.py) may be
    made to the plan as it stands rather than by a full replan. Not where a create replans in full
    too: a plan shorter than the cache's min_waiting (cheap then, and exact); a wait bound, age x
    size or keep_etas, which move or guard leases by what a whole plan finds; `fits` None, a caller
    that keeps no plan; nor where a running lease is under notice for this one (the replan gives it
    its own end back at once, or a new one for a new duration: early_ends.call_off_unneeded)."""
    if fits is None or not settings.fits_one_by_one:
        return False
    if session.scalar(NOTICED, {"lease": row.id}) is not None:
        return False
    return not fits.min_waiting or (session.scalar(PLANNED, {"most": fits.min_waiting}) or 0) >= fits.min_waiting

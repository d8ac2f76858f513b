"""A lease's history: every state change goes through record_transition, which
asks the state machine first, and writes the bus notifications it sends."""
from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import func, select, tuple_
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, to_epoch, utcnow_naive
from gpu_tenancy.domain.states import LeaseState, transition
from gpu_tenancy.engine import notifications
from gpu_tenancy.inert_text import printable


def record_transition(session: Session, row: m.Lease, target: LeaseState, now: int, actor: str,
                      why: str) -> m.Event:
    """The lease moved to `target`, and its event (added, not flushed), returned."""
    current = LeaseState(row.status) if row.status else None
    change = transition(row.id, current, target, at=now, actor=actor, reason=why)
    row.status = target.value
    row.updated_at = utcnow_naive(now)
    event = m.Event(lease=row, at=utcnow_naive(now), actor=actor, kind="transition",
                    from_state=change.from_state.value if change.from_state else None,
                    to_state=target.value, message=printable(why))
    session.add(event)
    notifications.on_transition(session, row, change.from_state, target, now)
    return event


# an engine step's reason asked again once it holds the lease's row (session, lease, now): what it
# read before the lock (an idle record, say) may have changed since
StillSo = Callable[[Session, m.Lease, int], bool]


def lease_in(session: Session, lease_id: str, state: LeaseState, *, ledger: bool = False) -> m.Lease | None:
    """The lease, if it is in `state`; None if it is gone or has moved on (another pass, or a
    request, got there first): the step that expected it there has nothing to do. Read with
    its row locked until the transaction ends (PostgreSQL: FOR UPDATE), so that a request or
    another pass that would move it meanwhile waits and then finds it moved on. `ledger`: the
    ledger lock first, for a step that plans the lease: the locks are always taken in that
    order (the ledger's, then a lease's: engine/leases.py lock_for_change), so no two wait on each other."""
    if ledger:
        ledger_lock(session)
    row = session.get(m.Lease, lease_id, with_for_update=True, populate_existing=True)
    return row if row is not None and row.status == state.value else None


def record_event(session: Session, row: m.Lease, kind: str, message: str, now: int, actor: str) -> None:
    """The message made printable: it may quote a tenant's Neutron network name or the cloud's words,
    and the dashboard, the API's readers and the admin exports show it as it is."""
    session.add(m.Event(lease=row, at=utcnow_naive(now), actor=actor, kind=kind, message=printable(message)))


E = m.Event
SHOWN = (E.at, E.actor, E.kind, E.from_state, E.to_state, E.message)   # what the API shows of an event


# past every event's id (PostgreSQL's integer): the far end of a lease's range in the index
BEYOND = 2**31


def of_lease(session: Session, lease_id: str, skip: int = 0, limit: int | None = None,
             newest_first: bool = False, after: int | None = None) -> tuple[list[Row], bool]:
    """The lease's history, oldest (or newest) first, from after the event `after` (its id: the
    page before ended there; None: from the first) less the first `skip` events of that order,
    at most `limit` of them (None: all); and whether more follow. Each row: SHOWN and the id.
    A lease's events only grow (the guest's readiness reports add one per VM every 15 s, a
    rename or extension one each): listed whole, one lease's history was an answer of any size.
    A page is a range of ix_events_lease_id_id from `after`; `skip` reads past what it skips."""
    low, high = (0, BEYOND) if after is None else (0, after) if newest_first else (after, BEYOND)
    q = select(*SHOWN, E.id)
    if session.get_bind().dialect.name == "postgresql":
        # both ends (lease_id, id) pairs, in that order: said `lease_id = ? AND id > ? ORDER BY id`,
        # PostgreSQL took the lease's events for spread evenly over the ids and walked the primary
        # key from the marker, through every later event of every lease when this one's ended
        # there (0.7 s for the last page of 200,000 among 2 million events; 0.5 ms as a range)
        key = tuple_(E.lease_id, E.id)
        q = q.where(key > tuple_(lease_id, low), key < tuple_(lease_id, high)).order_by(
            *((E.lease_id.desc(), E.id.desc()) if newest_first else (E.lease_id, E.id)))
    else:   # SQLite reads a range of pairs as all of the lease's events, each tried: these it seeks
        q = q.where(E.lease_id == lease_id, E.id > low, E.id < high).order_by(
            E.id.desc() if newest_first else E.id)
    q = q.offset(skip)
    if limit is None:
        return list(session.execute(q)), False
    rows = list(session.execute(q.limit(limit + 1)))
    return rows[:limit], len(rows) > limit


def entered_at(session: Session, lease_id: str, state: LeaseState, default: int) -> int:
    """When the lease last entered `state` (its latest transition there), else `default`."""
    at = session.scalar(select(func.max(m.Event.at)).where(m.Event.lease_id == lease_id,
                                                           m.Event.to_state == state.value))
    return to_epoch(at) if at is not None else default

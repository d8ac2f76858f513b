"""The cloud's own lease history, read from the database for the what-if: the leases asked
for in the last N days that held GPUs, with the hosts in service, quotas and priority
classes as they are now."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine.ledger import host_from_row, quota_from_row
from gpu_tenancy.whatif.history import History, Lease

S = LeaseState
# states a lease has once it held GPUs (failed and cancelled only with a start: see `load`)
STARTED = tuple(s.value for s in (S.PROVISIONING, S.ACTIVE, S.ENDING, S.ENDED, S.PREEMPTED, S.FAILED,
                                  S.CANCELLED))
MAX_DAYS = 90
MAX_LEASES = 20000


class TooMuch(ValueError):
    """The window holds more than the what-if replays at once."""


def _window(now: int, days: float) -> tuple[int, int]:
    return now - round(days * 86400), now


def count(session: Session, now: int, days: float) -> int:
    start, end = _window(now, days)
    return session.scalar(select(func.count()).select_from(m.Lease).where(*_where(start, end, now))) or 0


def _where(start: int, end: int, now: int) -> tuple:
    return (m.Lease.created_at >= utcnow_naive(start), m.Lease.created_at < utcnow_naive(end),
            m.Lease.status.in_(STARTED), m.Lease.start_at.is_not(None), m.Lease.end_at.is_not(None),
            m.Lease.start_at <= utcnow_naive(now), m.Lease.end_at > m.Lease.start_at)


def load(session: Session, now: int, days: float, limit: int = MAX_LEASES) -> History:
    """The history of the `days` days up to now. A lease counts once it held GPUs (its committed
    start has come); it held them from that start to its committed end (moved earlier when it
    ended early; its planned end while it runs). TooMuch past `limit` leases."""
    start, end = _window(now, days)
    n = count(session, now, days)
    if n > limit:
        raise TooMuch(f"the last {days:g} days hold {n} leases: at most {limit} are replayed at once; ask for fewer days")
    rows = session.execute(
        select(m.Lease.id, m.Lease.project_id, m.Lease.gpu_model, m.Lease.gpus_per_vm, m.Lease.instances,
               m.Lease.duration, m.Lease.earliest_start, m.Lease.start_at, m.Lease.end_at, m.Lease.priority,
               m.Lease.priority_class, m.Lease.created_at)
        .where(*_where(start, end, now)).order_by(m.Lease.created_at, m.Lease.arrival, m.Lease.id))
    leases = []
    actual = {}
    for seq, r in enumerate(rows, 1):
        began = to_epoch(r.start_at)
        leases.append(Lease(r.id, r.project_id, to_epoch(r.created_at), max(1, to_epoch(r.end_at) - began),
                            r.gpus_per_vm, r.instances, asked=r.duration, gpu_model=r.gpu_model,
                            priority=r.priority, earliest_start=to_epoch(r.earliest_start),
                            priority_class=r.priority_class, seq=seq))
        actual[r.id] = began
    hosts = tuple(host_from_row(h) for h in session.execute(select(m.Host.__table__).order_by(m.Host.name)))
    quotas = {(q.project_id, q.gpu_model): quota_from_row(q) for q in session.execute(select(m.Quota.__table__))}
    classes = {c.name: c.priority for c in session.execute(select(m.PriorityClass.name, m.PriorityClass.priority))}
    return History(start, end, hosts, quotas, tuple(leases), classes, actual)

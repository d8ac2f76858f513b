"""GPU-hours per project (and user) and GPU model, from the ledger. An allocation counts
for the time it really held GPUs: the engine cuts the allocations of leases
that end early, and nothing after `now` counts. A running lease moved off a
host that went down keeps what it used there as spent allocations."""
from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select, union_all
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.calendar import overlap
from gpu_tenancy.domain.model import Hold
from gpu_tenancy.domain.states import HOLDING, LeaseState
from gpu_tenancy.engine.capacity import holds_between

S = LeaseState
# leases whose allocations were (or are being) used; cancelled and expired ones never held GPUs
USED_GPUS = HOLDING | {S.ENDED, S.FAILED, S.PREEMPTED}


USED = [s.value for s in USED_GPUS]
A, SPENT, LEASES = m.Allocation.__table__.c, m.SpentAllocation.__table__.c, m.Lease.__table__.c


def used_rows(session: Session, start: int, end: int, project_id: str | None = None) -> list[Row]:
    """(project_id, user_id, gpu_model, gpus, start_at, end_at) of each allocation that used (or
    is using) GPUs over [start, end), and of each spent part of one on a host that went down; the
    user is the one who asked for the lease. One Core statement of the columns figures need: usage
    read the ledger's allocations as ORM objects twice (once per figure) and the leases' users
    apart, what grows with the history a window covers."""
    lo, hi = utcnow_naive(start), utcnow_naive(end)
    ledger_q = (select(A.project_id, LEASES.user_id, A.gpu_model, A.gpus, A.start_at, A.end_at)
                .join_from(m.Allocation.__table__, m.Lease.__table__, A.lease_id == LEASES.id)
                .where(LEASES.status.in_(USED), A.start_at < hi, A.end_at > lo))
    # a spent part's lease is there (its foreign key); joined outer all the same: a user unknown is ""
    spent_q = (select(SPENT.project_id, LEASES.user_id, SPENT.gpu_model, SPENT.gpus, SPENT.start_at, SPENT.end_at)
               .join_from(m.SpentAllocation.__table__, m.Lease.__table__, SPENT.lease_id == LEASES.id, isouter=True)
               .where(SPENT.start_at < hi, SPENT.end_at > lo))
    if project_id is not None:
        ledger_q, spent_q = ledger_q.where(A.project_id == project_id), spent_q.where(SPENT.project_id == project_id)
    return list(session.execute(union_all(ledger_q, spent_q)))


def figures(session: Session, start: int, end: int, now: int, project_id: str | None = None
            ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """gpu_hours and gpu_hours_by_user over [start, min(end, now)), from one read (used_rows)."""
    until = min(end, now)
    by_model: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_user: dict[tuple[str, str, str], int] = defaultdict(int)
    if until > start:
        for r in used_rows(session, start, until, project_id):
            s = r.gpus * overlap(to_epoch(r.start_at), to_epoch(r.end_at), start, until)
            by_model[r.project_id][r.gpu_model] += s
            by_user[r.project_id, r.user_id or "", r.gpu_model] += s
    if project_id is not None:
        by_model.setdefault(project_id, defaultdict(int))
    hours = {project: {model: round(s / 3600, 4) for model, s in sorted(models.items())}
             for project, models in sorted(by_model.items())}
    users: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for (project, user, model), s in sorted(by_user.items()):
        users[project][user][model] = round(s / 3600, 4)
    return hours, {project: dict(u) for project, u in users.items()}


def gpu_hours(session: Session, start: int, end: int, now: int,
              project_id: str | None = None) -> dict[str, dict[str, float]]:
    """{project: {gpu model: GPU-hours}} over [start, min(end, now)); one project or all (None)."""
    return figures(session, start, end, now, project_id)[0]


def gpu_hours_by_user(session: Session, start: int, end: int, now: int,
                      project_id: str | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """{project: {user: {gpu model: GPU-hours}}} over [start, min(end, now)): the user is the
    one who asked for the lease. Each figure is rounded as gpu_hours rounds its own."""
    return figures(session, start, end, now, project_id)[1]


def used_between(session: Session, start: int, end: int, project_id: str | None = None) -> list[Hold]:
    """Every hold that used (or is using) GPUs over [start, end): the ledger's, and
    the spent parts of holds on hosts that went down."""
    q = select(m.SpentAllocation).where(m.SpentAllocation.start_at < utcnow_naive(end),
                                        m.SpentAllocation.end_at > utcnow_naive(start))
    if project_id is not None:
        q = q.where(m.SpentAllocation.project_id == project_id)
    spent = [Hold(s.lease_id, s.project_id, s.host, s.gpu_model, s.gpus, to_epoch(s.start_at), to_epoch(s.end_at))
             for s in session.scalars(q)]
    return holds_between(session, start, end, USED_GPUS, project_id) + spent


def keep_spent(session: Session, row: m.Lease, now: int) -> None:
    """Before a running lease's allocations are replaced, keep the part it used."""
    stamp = utcnow_naive(now)
    for alloc in row.allocations:
        if alloc.start_at < stamp:
            session.add(m.SpentAllocation(lease_id=row.id, project_id=row.project_id, host=alloc.host,
                                          gpu_model=alloc.gpu_model, gpus=alloc.gpus, start_at=alloc.start_at,
                                          end_at=min(alloc.end_at, stamp)))

"""GPU-hours per project (and user) and GPU model, from the ledger. An allocation counts
for the time it really held GPUs: the engine cuts the allocations of leases
that end early, and nothing after `now` counts. A running lease moved off a
host that went down keeps what it used there as spent allocations."""
from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
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


def gpu_hours(session: Session, start: int, end: int, now: int,
              project_id: str | None = None) -> dict[str, dict[str, float]]:
    """{project: {gpu model: GPU-hours}} over [start, min(end, now)); one project or all (None)."""
    until = min(end, now)
    seconds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if until > start:
        for hold in used_between(session, start, until, project_id):
            seconds[hold.project_id][hold.gpu_model] += hold.gpus * overlap(hold.start, hold.end, start, until)
    if project_id is not None:
        seconds.setdefault(project_id, defaultdict(int))
    return {project: {model: round(s / 3600, 4) for model, s in sorted(models.items())}
            for project, models in sorted(seconds.items())}


def gpu_hours_by_user(session: Session, start: int, end: int, now: int,
                      project_id: str | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """{project: {user: {gpu model: GPU-hours}}} over [start, min(end, now)): the user is the
    one who asked for the lease. Each figure is rounded as gpu_hours rounds its own."""
    until = min(end, now)
    seconds: dict[tuple[str, str, str], int] = defaultdict(int)
    if until > start:
        holds = used_between(session, start, until, project_id)
        owners = lease_users(session, {hold.lease_id for hold in holds})
        for hold in holds:
            seconds[hold.project_id, owners.get(hold.lease_id, ""), hold.gpu_model] += \
                hold.gpus * overlap(hold.start, hold.end, start, until)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for (project, user, model), s in sorted(seconds.items()):
        out[project][user][model] = round(s / 3600, 4)
    return {project: dict(users) for project, users in out.items()}


def lease_users(session: Session, lease_ids: set[str]) -> dict[str, str]:
    ids = sorted(lease_ids)
    found: dict[str, str] = {}
    for i in range(0, len(ids), 500):   # bounded IN lists
        rows = session.execute(select(m.Lease.id, m.Lease.user_id).where(m.Lease.id.in_(ids[i:i + 500])))
        found.update((lease_id, user_id) for lease_id, user_id in rows)
    return found


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

"""Each project's start-by margin ratio (domain/start_by.py), computed from the database now and
then by the engine and kept in the start_by_margins table, where a create (engine/ask_facts.py)
and a replan (engine/ledger.py) read it to tell a waiting lease its start-by beside its ETA.

The samples are the model's: a project's last WINDOW leases that waited and started (their
lateness past the first ETA over the wait it planned), and its leases still waiting past that
ETA, at how late they are so far. A lease's wait is counted from when it was asked for, or from
the start it asked for if later (a reservation for next week plans no wait). Started means given
its GPUs: scheduled with its start come, or any state after; a failed lease is left out (it may
have failed while it waited). Only leases started within HORIZON count, so the read stays a range
of the (project, start) index however long the history."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.start_by import WINDOW, lateness_ratio, margin
from gpu_tenancy.domain.states import WAITING, LeaseState

EVERY = 60             # seconds between two computations (the engine's tick: engine/lifecycle.py)
HORIZON = 30 * 86400   # started leases older than this do not count
EVERYONE = ""          # the row of everyone's ratio
S = LeaseState
STARTED = [s.value for s in (S.SCHEDULED, S.PROVISIONING, S.ACTIVE, S.ENDING, S.PARKING, S.PARKED, S.RESUMING,
                             S.ENDED, S.PREEMPTED)]
L = m.Lease


def wait_from(created_at: datetime, earliest_start: datetime) -> int:
    """When a lease's wait began: when it was asked for, or the start it asked for if later."""
    return max(to_epoch(created_at), to_epoch(earliest_start))


def samples(session: Session, now: int) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[float]]]:
    """Per project: its last WINDOW started leases that waited, (start, ratio), latest first;
    and the ratios so far of the WINDOW of its waiting leases whose first ETA passed last."""
    at, since = utcnow_naive(now), utcnow_naive(now - HORIZON)
    rank = func.row_number().over(partition_by=L.project_id, order_by=(L.start_at.desc(), L.id.desc()))
    ranked = select(L.project_id, L.created_at, L.earliest_start, L.first_eta, L.start_at, rank.label("rank")).where(
        L.status.in_(STARTED), L.first_eta.is_not(None), L.start_at <= at, L.start_at > since,
        L.start_at > L.created_at, L.start_at > L.earliest_start).subquery()
    started: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in session.execute(select(ranked).where(ranked.c.rank <= WINDOW)
                             .order_by(ranked.c.project_id, ranked.c.rank)):
        start = to_epoch(r.start_at)
        started[r.project_id].append((start, lateness_ratio(wait_from(r.created_at, r.earliest_start),
                                                            to_epoch(r.first_eta), start)))
    late: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in session.execute(select(L.project_id, L.created_at, L.earliest_start, L.first_eta).where(
            L.status.in_([s.value for s in WAITING]), L.first_eta < at)):
        eta = to_epoch(r.first_eta)
        late[r.project_id].append((eta, lateness_ratio(wait_from(r.created_at, r.earliest_start), eta, now)))
    overdue = {project: [ratio for _eta, ratio in sorted(pairs)[-WINDOW:]] for project, pairs in late.items()}
    return dict(started), overdue


def compute(started: dict[str, list[tuple[int, float]]], overdue: dict[str, list[float]]) -> dict[str, tuple[float, int]]:
    """Each project's (ratio, samples), and everyone's under EVERYONE."""
    latest = sorted((pair for pairs in started.values() for pair in pairs), reverse=True)[:WINDOW]
    everyone = [ratio for _start, ratio in latest]
    ratios = {EVERYONE: (margin((), (), everyone), len(everyone))}
    for project in started.keys() | overdue.keys():
        own = [ratio for _start, ratio in started.get(project, ())]
        late = overdue.get(project, [])
        ratios[project] = (margin(own, late, everyone), len(own) + len(late))
    return ratios


def refresh(session: Session, now: int) -> dict[str, tuple[float, int]]:
    """Compute every project's ratio and keep them (the caller commits); returns them."""
    ratios = compute(*samples(session, now))
    session.execute(delete(m.StartByMargin))
    session.add_all(m.StartByMargin(project_id=project, ratio=ratio, samples=n, computed_at=utcnow_naive(now))
                    for project, (ratio, n) in ratios.items())
    return ratios


def read(session: Session) -> dict[str, float]:
    """The ratios kept: project -> ratio (everyone's under EVERYONE)."""
    return {project: ratio for project, ratio in session.execute(select(m.StartByMargin.project_id, m.StartByMargin.ratio))}


def ratio_of(ratios: dict[str, float], project_id: str) -> float:
    """A project's ratio, else everyone's, else none (0: the start-by is the ETA)."""
    return ratios.get(project_id, ratios.get(EVERYONE, 0.0))

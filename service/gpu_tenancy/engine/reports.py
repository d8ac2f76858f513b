"""The owners' figures and the exports, read from the database; the
arithmetic is in domain/figures.py."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, ContextManager, Iterator

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain import figures
from gpu_tenancy.domain.eta_honesty import eta_kept_by_day
from gpu_tenancy.domain.states import WAITING, LeaseState
from gpu_tenancy.engine import gpu_activity
from gpu_tenancy.engine.capacity import calendar
from gpu_tenancy.engine.metrics import first_start
from gpu_tenancy.engine.usage import gpu_hours, used_between
from gpu_tenancy.timeutil import rfc3339

FIGURES = ("wait_by_day", "on_time_share", "eta_kept", "eta_lateness", "first_try_success", "failures_by_class",
           "hourly_gpu_use", "idle_fragmentation", "cancel_ratio", "gpu_hours_used", "idle_leases")
EXPORTS = ("leases", "events", "usage")
EXPORT_PAGE = 1000   # rows an export reads at a time (the API's max_page_size by default)


def lease_facts(session: Session, start: int, end: int) -> list[figures.LeaseFacts]:
    """Leases whose requested start or creation falls in [start, end), with
    what their events tell."""
    lo, hi = utcnow_naive(start), utcnow_naive(end)
    asked = func.coalesce(m.Lease.asked_start, m.Lease.earliest_start)
    rows = list(session.scalars(select(m.Lease).where(
        ((asked >= lo) & (asked < hi))
        | ((m.Lease.created_at >= lo) & (m.Lease.created_at < hi)))))
    transitions: dict[str, list[m.Event]] = defaultdict(list)
    ids = [r.id for r in rows]
    for chunk in range(0, len(ids), 500):
        for event in session.scalars(select(m.Event).where(
                m.Event.lease_id.in_(ids[chunk:chunk + 500]), m.Event.kind == "transition").order_by(m.Event.id)):
            transitions[event.lease_id].append(event)
    return [_facts(row, transitions[row.id]) for row in rows]


def _facts(row: m.Lease, events: list[m.Event]) -> figures.LeaseFacts:
    active_at = cancelled_at = outcome = first_boot = None
    for event in events:
        if event.to_state == LeaseState.PROVISIONING.value and first_boot is None:
            first_boot = event.at
        if event.to_state == LeaseState.ACTIVE.value and active_at is None:
            active_at = to_epoch(event.at)
        if event.to_state == LeaseState.CANCELLED.value:
            cancelled_at = to_epoch(event.at)
        if event.from_state == LeaseState.PROVISIONING.value and outcome is None:
            outcome = event.to_state
            # the engine fails a boot through ending (its VMs removed), failure set in that same
            # step: a failure, not an owner's end while it booted (which sets none)
            if outcome == LeaseState.ENDING.value and row.failure_class:
                outcome = LeaseState.FAILED.value
    return figures.LeaseFacts(
        lease_id=row.id, project_id=row.project_id, gpu_model=row.gpu_model, gpus=row.gpus_per_vm * row.instances,
        status=row.status, created_at=to_epoch(row.created_at), requested_start=to_epoch(row.asked_start or row.earliest_start),
        # started once it began to boot: till then (waiting, or booked ahead and maybe cancelled
        # before it) its start_at is only planned, and no wait (the /metrics histogram's rule)
        start=first_start(row.start_at, first_boot) if first_boot is not None else None,
        active_at=active_at, cancelled_at=cancelled_at,
        first_provisioning_outcome=outcome, failure_class=row.failure_class,
        first_eta=to_epoch(row.first_eta), first_start_by=to_epoch(row.first_start_by))


def hosts_now(session: Session, now: int, floor: int) -> list[figures.HostNow]:
    return [figures.HostNow(h.host, h.gpu_model, h.gpus, h.free[0][2] if h.free else h.gpus, h.in_service)
            for h in calendar(session, now, now + 1, floor)]


def all_figures(session: Session, start: int, end: int, now: int, floor: int,
                idle_minutes: int = 30) -> dict[str, list[dict]]:
    """Every figure over [start, end); idle fragmentation and idle leases are of `now` (`floor`:
    the least release allowance, PlannerSettings.release_floor; `idle_minutes`: how long a
    lease's GPUs are idle before it counts as idle, config idle_minutes)."""
    facts = lease_facts(session, start, end)
    until = min(end, now)
    holds = [(h.start, h.end, h.gpus) for h in used_between(session, start, until)] if until > start else []
    capacity = sum(h.gpus for h in session.scalars(select(m.Host)))
    waiting = session.execute(select(m.Lease.gpu_model, m.Lease.gpus_per_vm).where(
        m.Lease.status.in_([s.value for s in WAITING])))
    eta_rows = eta_kept_by_day(facts, now)
    return {
        "wait_by_day": figures.wait_by_day(facts),
        "on_time_share": figures.on_time_share(facts, now),
        "eta_kept": eta_rows,
        "eta_lateness": eta_rows,
        "first_try_success": figures.first_try_success(facts),
        "failures_by_class": figures.failures_by_class(facts),
        "hourly_gpu_use": figures.hourly_gpu_use(holds, capacity, start, until) if until > start else [],
        "idle_fragmentation": figures.idle_fragmentation(hosts_now(session, now, floor), [(w[0], w[1]) for w in waiting]),
        "cancel_ratio": figures.cancel_ratio(facts),
        "gpu_hours_used": gpu_activity.use_by_project(session, start, end, now),
        "idle_leases": gpu_activity.idle_now(session, now, idle_minutes),
    }


def export(transaction: Callable[[], ContextManager[Session]], what: str, start: int, end: int,
           now: int) -> Iterator[dict]:
    """Flat rows of leases (created in the window), their events, or GPU-hours per project and model.
    Leases and events are read EXPORT_PAGE at a time, each page in a transaction of its own
    (`transaction()`), after the last one's key: a quarter of a busy cloud is never all in memory,
    and a client slow to read the download holds no transaction (SQLite: the write lock) open."""
    lo, hi = utcnow_naive(start), utcnow_naive(end)
    if what == "usage":   # a row per project and model: as few as the figures
        with transaction() as session:
            hours = gpu_hours(session, start, end, now)
        yield from ({"project_id": p, "gpu_model": model, "gpu_hours": h, "start": rfc3339(start),
                     "end": rfc3339(end)} for p, models in hours.items() for model, h in models.items())
        return
    in_window = (m.Lease.created_at >= lo) & (m.Lease.created_at < hi)
    if what == "leases":
        L = m.Lease
        columns = (L.id, L.name, L.project_id, L.user_id, L.status, L.shape, L.gpu_model, L.gpus_per_vm,
                   L.instances, L.duration, L.asked_start, L.earliest_start, L.start_at, L.end_at,
                   L.failure_class, L.created_at)
        after: tuple | None = None
        while True:
            q = select(*columns).where(in_window).order_by(L.created_at, L.id).limit(EXPORT_PAGE)
            if after is not None:
                q = q.where((L.created_at > after[0]) | ((L.created_at == after[0]) & (L.id > after[1])))
            with transaction() as session:
                page = list(session.execute(q))
            yield from ({"id": r.id, "name": r.name, "project_id": r.project_id, "user_id": r.user_id,
                         "status": r.status, "shape": r.shape, "gpu_model": r.gpu_model,
                         "gpus_per_instance": r.gpus_per_vm, "instances": r.instances, "duration": r.duration,
                         "requested_start": rfc3339(to_epoch(r.asked_start or r.earliest_start)),
                         "start": rfc3339(to_epoch(r.start_at)), "end": rfc3339(to_epoch(r.end_at)),
                         "failure_class": r.failure_class, "created_at": rfc3339(to_epoch(r.created_at))}
                        for r in page)
            if len(page) < EXPORT_PAGE:
                return
            after = (page[-1].created_at, page[-1].id)
    E = m.Event
    last = 0
    while True:
        of_events = (select(E.id, E.lease_id, E.at, E.actor, E.kind, E.from_state, E.to_state, E.message)
                     .where(E.lease_id.in_(select(m.Lease.id).where(in_window)), E.id > last)
                     .order_by(E.id).limit(EXPORT_PAGE))
        with transaction() as session:
            events = list(session.execute(of_events))
        yield from ({"lease_id": e.lease_id, "at": rfc3339(to_epoch(e.at)), "actor": e.actor, "kind": e.kind,
                     "from": e.from_state, "to": e.to_state, "message": e.message} for e in events)
        if len(events) < EXPORT_PAGE:
            return
        last = events[-1].id

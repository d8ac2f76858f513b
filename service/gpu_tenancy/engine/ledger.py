"""The one writer of allocations: load what the planner needs, plan, and
commit the decisions under the ledger lock, so two requests can never take
the same GPUs."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, to_epoch, utcnow_naive
from gpu_tenancy.domain import fairshare, planner
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, Plan, PlannedLease, QuotaLimit
from gpu_tenancy.domain.states import HOLDING, LeaseState
from gpu_tenancy.engine import planner_settings
from gpu_tenancy.engine.events import record_transition
from gpu_tenancy.engine.metrics import PLANNER_SECONDS
from gpu_tenancy.timeutil import rfc3339

S = LeaseState


@dataclass
class PlannerInputs:
    hosts: list[Host]
    holds: list[Hold]
    quotas: dict[tuple[str, str], QuotaLimit]
    waiting: list[LeaseRequest]
    usage: dict[tuple[str, str], float]


def host_from_row(row: m.Host) -> Host:
    # a down, disabled or drained host takes nothing new
    return Host(row.name, row.gpu_model, row.gpus, enabled=row.enabled and row.up and not row.drained,
                aggregate=row.aggregate)


def quota_from_row(row: m.Quota) -> QuotaLimit:
    return QuotaLimit(row.project_id, row.gpu_model, row.gpus, row.borrow_gpus, row.max_duration, row.weight)


def request_from_row(row: m.Lease) -> LeaseRequest:
    return LeaseRequest(
        lease_id=row.id, project_id=row.project_id, gpu_model=row.gpu_model, gpus_per_vm=row.gpus_per_vm,
        instances=row.instances, duration=row.duration, earliest_start=to_epoch(row.earliest_start),
        latest_start=to_epoch(row.latest_start), created_at=to_epoch(row.created_at),
        priority=row.priority, name=row.name, preemptible=row.preemptible)


def load_inputs(session: Session, now: int, half_life: int) -> PlannerInputs:
    hosts = [host_from_row(h) for h in session.scalars(select(m.Host).order_by(m.Host.name))]
    holding = [s.value for s in HOLDING]
    # A lease's GPUs stay taken until the cloud has released them (the lease is
    # ended), even when its planned end has passed: Placement lags behind.
    holds = [Hold(a.lease_id, a.project_id, a.host, a.gpu_model, a.gpus, to_epoch(a.start_at),
                  max(to_epoch(a.end_at), now + 1), a.borrowing, preemptible, priority)
             for a, preemptible, priority in session.execute(
                 select(m.Allocation, m.Lease.preemptible, m.Lease.priority).join(m.Lease)
                 .where(m.Lease.status.in_(holding)))]
    quotas = {(q.project_id, q.gpu_model): quota_from_row(q) for q in session.scalars(select(m.Quota))}
    waiting = [request_from_row(r) for r in session.scalars(
        select(m.Lease).where(m.Lease.status == S.QUEUED.value).order_by(m.Lease.created_at, m.Lease.id))]
    # Fair share looks back a few half-lives; older use has decayed to nothing.
    since = utcnow_naive(now - 4 * half_life)
    records = [(a.project_id, a.gpu_model, a.gpus, to_epoch(a.start_at), to_epoch(a.end_at))
               for a in session.scalars(select(m.Allocation).where(m.Allocation.end_at > since))]
    usage = fairshare.decayed_gpu_hours(records, now, half_life)
    return PlannerInputs(hosts, holds, quotas, waiting, usage)


def run_planner(inputs: PlannerInputs, now: int, half_life: int,
                extra: list[LeaseRequest] = ()) -> Plan:
    settings = planner_settings.settings(half_life)
    return planner.plan(now, inputs.hosts, inputs.holds, inputs.quotas, [*inputs.waiting, *extra],
                        inputs.usage, settings)


def replan(session: Session, now: int, half_life: int, actor: str = "planner") -> Plan:
    """Plan every waiting lease and commit what the plan decides: leases whose
    start has come, and reservations that start exactly when asked, get their
    GPUs in the ledger (scheduled); the rest keep their position, ETA and reasons.
    Queued leases whose latest start has passed expire. The caller commits."""
    ledger_lock(session)
    expire_overdue(session, now, actor)
    inputs = load_inputs(session, now, half_life)
    with PLANNER_SECONDS.time():
        plan = run_planner(inputs, now, half_life)
    waiting = {r.lease_id: r for r in inputs.waiting}
    rows = {row.id: row for row in session.scalars(
        select(m.Lease).where(m.Lease.id.in_(list(waiting))))} if waiting else {}
    for planned in plan.leases.values():
        row = rows.get(planned.lease_id)
        if row is None:
            continue
        request = waiting[planned.lease_id]
        place = planned.placement
        if place is not None and (place.start <= now or place.start == request.earliest_start):
            commit_allocation(session, row, planned, now, actor)
        else:
            write_queue_info(row, planned)
    return plan


def expire_overdue(session: Session, now: int, actor: str) -> None:
    overdue = session.scalars(select(m.Lease).where(
        m.Lease.status == S.QUEUED.value, m.Lease.latest_start.is_not(None),
        m.Lease.latest_start < utcnow_naive(now)))
    for row in overdue:
        record_transition(session, row, S.EXPIRED, now, actor,
                          "its latest start passed before GPUs were free for it")
        clear_queue_info(row)


def commit_allocation(session: Session, row: m.Lease, planned: PlannedLease, now: int, actor: str) -> None:
    place = planned.placement
    start, end = utcnow_naive(place.start), utcnow_naive(place.end)
    for index, host_name in enumerate(place.hosts):
        session.add(m.Allocation(lease_id=row.id, project_id=row.project_id, vm_index=index,
                                 host=host_name, gpu_model=row.gpu_model, gpus=row.gpus_per_vm,
                                 start_at=start, end_at=end, borrowing=planned.borrowing))
    row.start_at, row.end_at, row.borrowing = start, end, planned.borrowing
    hosts = ", ".join(sorted(set(place.hosts)))
    when = "now" if place.start <= now else f"at {rfc3339(place.start)}"
    why = f"GPUs reserved on {hosts}, starting {when}"
    if planned.borrowing:
        why += "; borrowing idle capacity beyond the project's quota"
    record_transition(session, row, S.SCHEDULED, now, actor, why)
    clear_queue_info(row)


def write_queue_info(row: m.Lease, planned: PlannedLease) -> None:
    row.queue_position = planned.position
    row.queue_eta = utcnow_naive(planned.eta) if planned.eta is not None else None
    row.queue_reasons = [{"code": r.code, "message": r.message} for r in planned.reasons]
    if planned.placement is not None:
        row.start_at = utcnow_naive(planned.placement.start)
        row.end_at = utcnow_naive(planned.placement.end)
    else:
        row.start_at = row.end_at = None


def clear_queue_info(row: m.Lease) -> None:
    row.queue_position, row.queue_eta, row.queue_reasons = None, None, []


def dry_run(session: Session, now: int, half_life: int, request: LeaseRequest) -> PlannedLease:
    """Where a lease would land if it were asked for now; writes nothing."""
    inputs = load_inputs(session, now, half_life)
    return run_planner(inputs, now, half_life, extra=[request]).leases[request.lease_id]


def new_lease_id() -> str:
    return str(uuid.uuid4())

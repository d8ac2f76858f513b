"""Retry and re-placement after a failure.

A lease whose attempt failed for a host-level reason (see the taxonomy in
domain/failures.py) loses its VMs and its hold, and is planned again on its
own, before the queue, on other hosts than the ones that failed it, no sooner
than its backoff. A lease on a host that went down is re-placed the same way
(engine/host_failure.py). Every failure is a row of the lease's failure
history, with what the engine did about it.
"""
from __future__ import annotations

import dataclasses
import logging

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.cloud.driver import CloudError, ServerState
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.failures import FailureClass, retry_delay, rule
from gpu_tenancy.domain.model import LeaseRequest, PlannedLease
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import lease_flavor, ledger, releasing, start_by_margins
from gpu_tenancy.engine.events import entered_at, lease_in, record_event, record_transition
from gpu_tenancy.timeutil import rfc3339

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
MIN_REMAINING = 60  # a re-placed lease with less left than this still gets a minute


def attempts_so_far(session: Session, lease_id: str) -> int:
    """The failed attempts of the lease's current start: those since it was last active. A lease
    that ran has its class's attempts again, however many hosts failed under it before (counted
    over its life, a long lease's third rescue off a down host failed it)."""
    last_active = (select(func.max(m.Event.at)).where(m.Event.lease_id == lease_id,
                                                      m.Event.to_state == S.ACTIVE.value)
                   .scalar_subquery())
    return session.scalar(select(func.count()).select_from(m.LeaseFailure).where(
        m.LeaseFailure.lease_id == lease_id,
        (m.LeaseFailure.at >= last_active) | last_active.is_(None))) or 0


def record_failure(session: Session, row: m.Lease, failure: FailureClass, message: str, now: int,
                   action: str, hosts: list[str], retry_at: int | None = None) -> m.LeaseFailure:
    entry = m.LeaseFailure(lease_id=row.id, at=utcnow_naive(now), attempt=attempts_so_far(session, row.id) + 1,
                           failure_class=failure.value, message=message, hosts=sorted(set(hosts)),
                           action=action, retry_at=utcnow_naive(retry_at) if retry_at is not None else None)
    session.add(entry)
    session.flush()
    return entry


def lease_hosts(row: m.Lease) -> list[str]:
    return sorted({s.host for s in row.servers} | {a.host for a in row.allocations})


def unrecorded_servers(cloud, lease_id: str, recorded: list[str]) -> list[ServerState] | None:
    """The lease's servers that the cloud has and the engine never recorded: a boot whose answer
    was lost after Nova made the server (a timeout), or the engine stopped just after asking.
    Left behind by a re-placement, the next boot would find it (a boot is idempotent per lease
    and VM) on the old host, whose GPUs the ledger has given to others. None: the cloud did not
    list them (the caller tries again later, as when a delete is refused)."""
    try:
        return [s for s in cloud.lease_servers(lease_id) if s.id not in recorded]
    except CloudError as exc:
        log.warning("listing the VMs of lease %s: %s", lease_id, exc)
        return None


def record_unrecorded(session: Session, row: m.Lease, servers: list[ServerState], now: int) -> None:
    """`servers` (unrecorded_servers, delete asked) on the lease's record: each on its VM's row
    that has no server yet on that host, else a row of its own; so that releasing.keep holds
    their GPUs until the cloud has released them."""
    for state in servers:
        slot = next((s for s in row.servers if s.cloud_id is None and s.host == state.host), None)
        if slot is None:
            slot = m.Server(vm_index=max((s.vm_index for s in row.servers), default=-1) + 1, host=state.host or "")
            row.servers.append(slot)
        slot.cloud_id, slot.status, slot.updated_at = state.id, state.status, utcnow_naive(now)
    session.flush()


def delete_servers(cloud, cloud_ids: list[str]) -> bool:
    """Ask the cloud to delete the VMs; False if it refused (the caller tries again later).
    This comes before the hold is moved: a boot is idempotent per lease and VM, so a VM
    left behind would be found again by the next boot."""
    try:
        for cloud_id in cloud_ids:
            cloud.delete_server(cloud_id)
    except CloudError as exc:
        log.warning("deleting the VMs of a failed attempt: %s", exc)
        return False
    return True


def delete_every_server(cloud, lease_id: str, cloud_ids: list[str]) -> list[ServerState] | None:
    """Delete the lease's VMs, those recorded (`cloud_ids`) and those the cloud has that were not
    (a boot whose answer was lost); the unrecorded ones, for record_unrecorded. None if the cloud
    did not say or refused a delete: the caller tries again at the next pass."""
    unrecorded = unrecorded_servers(cloud, lease_id, cloud_ids)
    if unrecorded is None or not delete_servers(cloud, cloud_ids + [s.id for s in unrecorded]):
        return None
    return unrecorded


def drop_servers(session: Session, row: m.Lease, now: int) -> None:
    """The lease's VMs, their delete asked for, off its record; the GPUs the cloud is still
    releasing stay held (engine/releasing.py). The caller flushes."""
    releasing.keep(session, row, now)
    for server in list(row.servers):
        session.delete(server)


def retry_elsewhere(lc, lease_id: str, failure: FailureClass, message: str,
                    state: LeaseState = S.PROVISIONING) -> bool:
    """Retry a provisioning lease on another host if its failure class allows another
    attempt; True if it was retried (re-planned), or will be at the next pass (the cloud
    refused to delete or list the failed attempt's VMs: its VM is still failed then, up to
    boot_timeout_seconds since the lease began starting), False if the lease must fail now.
    `state` resuming: a parked lease whose VM failed off the shelf (engine/resume.py), booted
    again the same way, for the time it had left."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, state)
        if row is None:
            return True
        starting_since = entered_at(session, lease_id, state, now)
        attempt = attempts_so_far(session, lease_id) + 1
        delay = retry_delay(failure, attempt, lc.config.retry_backoff_seconds, lc.config.retry_backoff_max_seconds)
        cloud_ids = [s.cloud_id for s in row.servers if s.cloud_id]
    if delay is None:
        return False
    unrecorded = delete_every_server(lc.cloud, lease_id, cloud_ids)
    if unrecorded is None:
        return now - starting_since <= lc.config.boot_timeout_seconds   # one refusal did not end the lease's tries
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, state, ledger=True)   # replaced below
        if row is None:
            return True
        record_unrecorded(session, row, unrecorded, now)   # their GPUs held till released, as the others'
        failed_on = lease_hosts(row)
        record_failure(session, row, failure, message, now, "retried", failed_on, now + delay)
        limit = rule(failure).max_attempts
        again = ("its VMs are deleted, the data volume kept, and it is booted again from its image"
                 if state is S.RESUMING else "trying again")
        record_event(session, row, "failure",
                     f"{failure.value}: {message}; {rule(failure).user_message}. Attempt {attempt} of {limit}: "
                     f"{again} on another host than {', '.join(failed_on)} in {delay} s", now, ACTOR)
        avoid = sorted(set(failed_on).union(*(f.hosts or [] for f in row.failures)))
        replace(session, row, now, now + delay, avoid=avoid, settings=lc.planner_settings,
                actor=ACTOR, duration=unpark_for_boot(row))
    lease_flavor.follow_placement(lc, lease_id)   # its class's inventory goes where it is planned now
    return True


def replace(session: Session, row: m.Lease, now: int, earliest: int, *, avoid: list[str],
            settings: planner.PlannerSettings, actor: str, duration: int) -> None:
    """Drop the lease's VMs and hold (the GPUs the cloud is still releasing stay held:
    engine/releasing.py), and plan it alone, before every waiting lease, on
    hosts other than `avoid` (on those too if nothing else can ever take it). Placed:
    scheduled; otherwise it waits in the queue again. The caller then moves the lease's
    inventory (lease_flavor.follow_placement), once this has committed. The ledger lock is
    taken first: the caller takes it before it reads the lease (lease_in's order)."""
    ledger_lock(session)
    started = row.status != S.SCHEDULED.value   # booting, running, resuming, or waiting again after that
    if row.status == S.SCHEDULED.value:
        record_transition(session, row, S.QUEUED, now, actor, "its planned hosts cannot take it")
    drop_servers(session, row, now)
    for alloc in list(row.allocations):
        session.delete(alloc)
    idle_starts_over(session, row)   # its VMs are new: idle counts from their reports, as after a resume
    session.flush()
    session.expire(row, ["servers", "allocations"])
    inputs = ledger.load_inputs(session, now, settings)
    request = LeaseRequest(lease_id=row.id, project_id=row.project_id, gpu_model=row.gpu_model,
                           gpus_per_vm=row.gpus_per_vm, instances=row.instances, duration=duration,
                           earliest_start=earliest, latest_start=None, created_at=to_epoch(row.created_at),
                           priority=row.priority, name=row.name, preemptible=row.preemptible)
    planned = plan_alone(inputs, now, request, avoid, settings)
    row.duration, row.earliest_start = duration, utcnow_naive(earliest)
    if started:   # its latest start was met then: the replan expired it, queued again past that,
        row.latest_start = None   # as a lease that never got GPUs (one that ran, off a dead host)
    if planned.placement is not None:
        ledger.commit_allocation(session, row, planned, now, actor)
    else:
        if row.status != S.QUEUED.value:
            record_transition(session, row, S.QUEUED, now, actor,
                              "no host can take it now; it waits in the queue again")
        ledger.write_queue_info(row, planned, now, start_by_margins.basis_now(session, row.project_id),
                                row.eta_guarded)   # planned alone: its guard kept


def idle_starts_over(session: Session, row: m.Lease) -> None:
    """The lease's idle record dropped: its VMs are new or back (a re-placement, a resume), and
    their idleness counts from their own reports, not the spell before."""
    activity = session.get(m.LeaseActivity, row.id)
    if activity is not None:
        session.delete(activity)


def plan_alone(inputs: ledger.PlannerInputs, now: int, request: LeaseRequest, avoid: list[str],
               settings: planner.PlannerSettings) -> PlannedLease:
    """`request` planned on its own against the holds, before every waiting lease, on hosts
    other than `avoid` (on those too if nothing else can ever take it)."""
    settings = ledger.settings_for(inputs, settings)
    others = [dataclasses.replace(h, enabled=False) if h.name in avoid else h for h in inputs.hosts]
    planned = planner.plan(now, others, inputs.holds, inputs.quotas, [request], inputs.usage,
                           settings).leases[request.lease_id]
    if planned.placement is None and avoid:
        planned = planner.plan(now, inputs.hosts, inputs.holds, inputs.quotas, [request], inputs.usage,
                               settings).leases[request.lease_id]
    return planned


def unpark_for_boot(row: m.Lease) -> int:
    """The time a lease booted again after a failed attempt gets: its duration, or for a
    resuming lease the time it had left when it parked. Changes the row: a resuming lease's
    park is cleared, over now that its VMs are booted afresh, and so is a warning it had
    before it parked: that was for its old end, and its new one is warned of again (as after
    a resume)."""
    if row.status != S.RESUMING.value:
        return row.duration
    duration = row.remaining or MIN_REMAINING
    row.parked_at = row.resume_by = row.remaining = row.warned_at = None
    return duration


def remaining_seconds(row: m.Lease, now: int) -> int:
    """What is left of a running lease's promised time."""
    end = to_epoch(row.end_at)
    return max(end - now, MIN_REMAINING) if end else row.duration


def describe_placement(row: m.Lease, now: int) -> str:
    """Where a lease stands after replace(), in words for its owner."""
    if row.status == S.SCHEDULED.value:
        assert row.start_at is not None   # a scheduled lease has its start
        start = to_epoch(row.start_at)
        hosts = ", ".join(sorted({a.host for a in row.allocations}))
        return f"re-placed on {hosts}, starting {'now' if start <= now else 'at ' + rfc3339(start)}"
    return "waiting in the queue for a host"

"""A host that goes down (Nova reports its nova-compute down) takes nothing new
(the planner skips it), and the leases it holds move: running and booting ones
are re-placed on other hosts ahead of the queue, their owners told why in the
lease's events and failure history; planned ones are planned again, and a parked
lease's held resume slot is held again on another host (park.move_slot). A host
up but disabled in the cloud takes nothing new either: its planned leases and
held slots move the same way, its running ones run on. A lease
resuming there is parked again elsewhere while its VMs are all still shelved, else
re-placed as a booting one is. A lease parking there whose VMs are not all on the shelf
yet cannot finish: its VMs are deleted, and it parks with its slot held elsewhere and is
booted again from its image when it resumes. The data volume stays the tenant's: deleting a VM
only detaches it."""
from __future__ import annotations

import logging

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, session_scope, to_epoch
from gpu_tenancy.domain.failures import FailureClass, retry_delay, rule
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.engine import lease_flavor, park, resume, retry
from gpu_tenancy.engine.events import lease_in, record_event, record_transition
from gpu_tenancy.engine.leases import end_allocations_at
from gpu_tenancy.engine.usage import keep_spent

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
MOVED = (S.ACTIVE.value, S.PROVISIONING.value, S.RESUMING.value)   # their VMs are (being) made there


def down_hosts(session) -> set[str]:
    return set(session.scalars(select(m.Host.name).where(m.Host.up.is_(False))))


def disabled_hosts(session) -> set[str]:
    """Up, but disabled in the cloud (`openstack compute service set --disable`): Nova places
    nothing more there, so what is planned there moves; what runs there runs on."""
    return set(session.scalars(select(m.Host.name).where(m.Host.up.is_(True), m.Host.enabled.is_(False))))


def leases_on(session, hosts: set[str]) -> list[tuple[str, str]]:
    """(lease id, status) of every lease holding GPUs on one of `hosts`, or a parked one's slot,
    by when it holds them next: a running lease before the slot of a parked (idle) one."""
    held = select(m.Allocation.lease_id).where(m.Allocation.host.in_(hosts))
    return list(session.execute(select(m.Lease.id, m.Lease.status).where(
        m.Lease.id.in_(held), m.Lease.status.in_([*MOVED, S.SCHEDULED.value, S.PARKED.value, S.PARKING.value]))
        .order_by(func.coalesce(m.Lease.resume_by, m.Lease.start_at))).all())


def handle_down_hosts(lc) -> int:
    """Move the leases off hosts that are down; returns how many moved. Leases moved
    before that found no host then are planned first, before the queue."""
    place_displaced(lc)
    with session_scope(lc.sessions) as session:
        down, disabled = down_hosts(session), disabled_hosts(session)
        affected = leases_on(session, down) if down else []
        planned_on_disabled = [(lease_id, status) for lease_id, status in leases_on(session, disabled)
                               if status in (S.SCHEDULED.value, S.PARKED.value)] if disabled else []
    for lease_id, status in affected:
        if status == S.RESUMING.value:
            resuming_on(lc, lease_id, down)
        elif status in MOVED:
            rescue(lc, lease_id, down)
        elif status == S.PARKED.value:
            move_parked(lc, lease_id, down)
        elif status == S.PARKING.value:
            parking_on(lc, lease_id, down)
        else:
            replan_scheduled(lc, lease_id, down)
    for lease_id, status in planned_on_disabled:
        if status == S.PARKED.value:
            move_parked(lc, lease_id, disabled, DISABLED)
        else:
            replan_scheduled(lc, lease_id, disabled, DISABLED)
    return len(affected) + len(planned_on_disabled)


def rescue(lc, lease_id: str, down: set[str]) -> None:
    lease_flavor.record_servers(lc, lease_id)   # a tenant lease: the servers booted since the last pass too
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = session.get(m.Lease, lease_id)
        if row is None or row.status not in MOVED or time_is_up(row, now):
            return
        # a tenant lease's server recorded gone just now is off the lease's flavor (resized by its
        # member, engine/resized.py): no longer the lease's, not deleted with its VMs
        cloud_ids = [s.cloud_id for s in row.servers if s.cloud_id
                     and not (row.boot == lease_flavor.TENANT and s.status in lease_flavor.GONE)]
    unrecorded = retry.delete_every_server(lc.cloud, lease_id, cloud_ids)
    if unrecorded is None:
        return  # the next tick tries again
    with session_scope(lc.sessions) as session:
        ledger_lock(session)   # before the lease's row (engine/events.py lease_in): it is replaced below
        row = session.get(m.Lease, lease_id, with_for_update=True, populate_existing=True)
        if row is None or row.status not in MOVED or time_is_up(row, now):
            return
        retry.record_unrecorded(session, row, unrecorded, now)
        lost = sorted(set(retry.lease_hosts(row)) & down)
        message = f"host {', '.join(lost)} went down (its nova-compute stopped reporting); its VMs there are gone"
        attempt = retry.attempts_so_far(session, lease_id) + 1
        if retry_delay(FailureClass.HOST_DOWN, attempt) is None:
            give_up(session, row, message, lost, now)
            return
        entry = retry.record_failure(session, row, FailureClass.HOST_DOWN, message, now, "replaced", lost)
        if row.status == S.ACTIVE.value:   # it used the GPUs until now: that still counts (a failed boot does not)
            keep_spent(session, row, now)
        resuming = row.status == S.RESUMING.value
        duration = retry.remaining_seconds(row, now) if row.status == S.ACTIVE.value else retry.unpark_for_boot(row)
        retry.replace(session, row, now, now, avoid=sorted(down), settings=lc.planner_settings,
                      actor=ACTOR, duration=duration)
        kept = ("; it was being unshelved there, so its VMs are booted again from its image" if resuming else "")
        kept += "; the data volume is kept and attached to the new VMs" if row.volume_id else ""
        record_event(session, row, "host_failure",
                     f"{message}{kept}. The lease is {retry.describe_placement(row, now)}, ahead of the queue "
                     f"(attempt {entry.attempt + 1})", now, ACTOR)
    lease_flavor.follow_placement(lc, lease_id)
    log.info("lease %s moved off down host(s) %s", lease_id, ", ".join(sorted(down)))


def time_is_up(row: m.Lease, now: int) -> bool:
    """A running lease whose end has come: the pass's ends end it (deleting its VMs, the dead
    host's too). Rescued, it was booted again elsewhere for the minute a re-placed lease gets."""
    return row.status == S.ACTIVE.value and row.end_at is not None and to_epoch(row.end_at) <= now


def give_up(session, row: m.Lease, message: str, lost: list[str], now: int) -> None:
    """Out of attempts: the lease fails (its VMs are deleted already, the volume kept)."""
    retry.record_failure(session, row, FailureClass.HOST_DOWN, message, now, "failed", lost)
    row.failure_class = FailureClass.HOST_DOWN.value
    row.failure_message = message
    record_event(session, row, "failure", f"host_down: {message}; {rule(FailureClass.HOST_DOWN).user_message}; "
                 "no attempts left", now, ACTOR)
    end_allocations_at(session, row, now)
    record_transition(session, row, S.ENDING, now, ACTOR, "failed (host_down); removing its VMs")


DOWN = "went down"
DISABLED = "is disabled in the cloud (its nova-compute service disabled)"


def replan_scheduled(lc, lease_id: str, down: set[str], what: str = DOWN) -> None:
    """A planned lease on a down (or cloud-disabled) host is planned again, on its own and
    first, for its original start."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.SCHEDULED, ledger=True)
        if row is None:
            return
        lost = sorted(set(retry.lease_hosts(row)) & down)
        if not lost:   # moved meanwhile
            return
        start = max(to_epoch(row.start_at), now)
        retry.replace(session, row, now, start, avoid=sorted(down), settings=lc.planner_settings,
                      actor=ACTOR, duration=row.duration)
        record_event(session, row, "host_failure", f"its planned host {', '.join(lost)} {what}; "
                     f"the lease is {retry.describe_placement(row, now)}", now, ACTOR)
    lease_flavor.follow_placement(lc, lease_id)


def move_parked(lc, lease_id: str, down: set[str], what: str = DOWN) -> None:
    """A parked lease's held slot on a down (or cloud-disabled) host is held again elsewhere.
    The cloud has nothing to follow: a parked lease has no inventory until it resumes."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKED, ledger=True)
        if row is None:
            return
        lost = sorted({a.host for a in row.allocations} & down)
        if not lost:   # moved meanwhile (a resume asked)
            return
        park.move_slot(session, row, now, lc.planner_settings, ACTOR, "host_failure",
                       f"the host of its held resume slot, {', '.join(lost)}, {what}")


def parking_on(lc, lease_id: str, down: set[str]) -> None:
    """A lease parking on a host that went down. Every VM there on the shelf already (its disk
    kept in the image store): the park goes on (park.advance_parking). A VM there not offloaded
    yet is on the dead host with its disk, and its shelve cannot finish (it waited
    boot_timeout_seconds, then failed, its time lost): the lease's VMs are deleted, every one
    (a resume unshelves all of a lease's VMs or boots all of them again: it cannot mix the two),
    its class's inventory removed (as at a park: nobody boots it outside its slot), and it parks
    at once, its slot held off the down host and its time left kept; at its resume it is booted
    again from its image with its data volume (resume.boot_again)."""
    with session_scope(lc.sessions) as session:
        row = session.get(m.Lease, lease_id)
        if row is None or row.status != S.PARKING.value or not {a.host for a in row.allocations} & down:
            return
        on_down = [s.cloud_id for s in row.servers if s.cloud_id and s.host in down]
        lost = sorted({a.host for a in row.allocations} & down)
        elsewhere = sum(1 for s in row.servers if s.cloud_id and s.host not in down)
    try:
        if all(lc.cloud.server_state(cloud_id).status == park.OFFLOADED for cloud_id in on_down):
            return
    except CloudError as exc:
        log.warning("reading the VMs of parking lease %s: %s", lease_id, exc)
        return   # the next pass looks again
    message = (f"host {', '.join(lost)} went down (its nova-compute stopped reporting) while its VMs were "
               "being shelved; their disks there are gone" + (
                   f", and its {elsewhere} VM(s) on other hosts are deleted too (a resume boots all of a "
                   "lease's VMs again, or unshelves them all)" if elsewhere else ""))
    if not park.without_vms(lc, lease_id, FailureClass.HOST_DOWN, message, failed_on=lost, kind="host_failure",
                            done="its VMs lost with their host, GPUs given back"):
        return
    log.info("parking lease %s lost its VMs with down host(s) %s; parked without them", lease_id, ", ".join(lost))


def resuming_on(lc, lease_id: str, down: set[str]) -> None:
    """A lease resuming on a host that went down. Its VMs all still on the shelf (none unshelved
    there yet): parked again, its slot moved off the host at once (resume.park_again). A VM
    unshelved there is off the shelf, its disk on the dead host, and cannot be unshelved
    elsewhere: the lease is re-placed as a booting one is, its VMs booted again (rescue). One
    with no VM (lost with their host while it parked) is booted again at once (resume.boot_again),
    off the down host as every plan is."""
    with session_scope(lc.sessions) as session:
        row = session.get(m.Lease, lease_id)
        none_shelved = row is not None and not any(s.cloud_id for s in row.servers)
    if none_shelved:
        resume.boot_again(lc, lease_id)
        return
    shelved = resume.all_shelved(lc, lease_id)
    if shelved is None:
        return   # the next pass looks again
    if not shelved:
        rescue(lc, lease_id, down)
        return
    with session_scope(lc.sessions) as session:
        row = session.get_one(m.Lease, lease_id)
        lost = ", ".join(sorted({a.host for a in row.allocations} & down))
    resume.park_again(lc, lease_id, FailureClass.HOST_DOWN, f"the host of its resume slot, {lost}, went down "
                      "(its nova-compute stopped reporting)", overdue=False, wait=False)


def displaced(session: Session) -> list[m.Lease]:
    """The queued leases that were moved (replaced or retried), in the queue's order. Each queued
    lease's failures are looked up by its id (ix_lease_failures_lease_id): as `id IN (SELECT
    lease_id ... WHERE action ...)`, SQLite read every failure ever recorded on each pass first."""
    f = m.LeaseFailure
    moved = select(f.id).where(f.lease_id == m.Lease.id, f.action.in_(("replaced", "retried"))).exists()
    return list(session.scalars(select(m.Lease).where(m.Lease.status == S.QUEUED.value, moved)
                                .order_by(m.Lease.created_at, m.Lease.arrival, m.Lease.id)))


def place_displaced(lc) -> None:
    """A lease that lost its host (or its attempt) and found no other waits in the
    queue; it has had its turn already, so it is planned on its own, ahead of the
    queue, before each replan: the first GPUs that come free are its."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        ledger_lock(session)   # before the leases' rows, which are replaced below
        rows = displaced(session)
        for row in rows:
            earliest = max(to_epoch(row.earliest_start), now)
            retry.replace(session, row, now, earliest, avoid=[], settings=lc.planner_settings,
                          actor=ACTOR, duration=row.duration)
        # only those placed now: one still waiting has no inventory since it was moved (a refusal
        # then is retried by follow_pending), and asking again each pass cost Placement calls per host
        moved_ids = [row.id for row in rows if row.status != S.QUEUED.value]
    for lease_id in moved_ids:
        lease_flavor.follow_placement(lc, lease_id)

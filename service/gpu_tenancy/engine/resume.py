"""Resuming a parked lease (engine/park.py) in its held slot.

- parked -> resuming: at the slot's start (`resume_by`, `begin_resume`), or on
  POST .../resume (`resume_early`: the earliest slot from now if that delays nobody
  planned, else the held one stays; a 403, nothing moved, where the hours it moves sooner would
  pass the project's GPU-hour budget); then the inventory on the slot's hosts and each VM
  unshelved pinned to its slot host (`advance_resuming`).
- resuming -> active (`_resumed`): every VM ACTIVE again with its volume; its idle record
  starts over.
- A resume that fails for the host's or the cloud's reason is tried again elsewhere, within
  the failure class's attempts, as a boot is (`retry_resume`): parked again with its slot
  moved while every VM is still on the shelf (`park_again`); VMs lost off the shelf beside
  unshelved ones booted again alone (engine/resume_lost.py); else booted again from its image.
- A lease whose VMs were lost with their host while it parked is booted again from its image
  at its resume (`boot_again`).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.cloud.driver import CloudError, ServerState
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.failures import FailureClass, classify_fault, cloud_said, retry_delay, rule
from gpu_tenancy.domain.budget import Span
from gpu_tenancy.domain.held import held_until
from gpu_tenancy.domain.model import PlannedLease
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import budgets, held, lease_flavor, ledger, park, resume_lost, retry, webhooks
from gpu_tenancy.engine.events import entered_at, lease_in, record_event, record_transition
from gpu_tenancy.engine.lease_flavor import vms_per_host
from gpu_tenancy.engine.leases import lock_for_change
from gpu_tenancy.errors import Conflict
from gpu_tenancy.timeutil import rfc3339

if TYPE_CHECKING:   # the engine's pass calls in here: imported for the annotations only
    from gpu_tenancy.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
UNSHELVING = "UNSHELVING"   # the server row's status once its unshelve was asked for


# --- the engine's pass ------------------------------------------------------------------------
def tick(lc: Lifecycle) -> None:
    """Resume parked leases whose slot has come, and carry resuming ones on."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        due = list(session.scalars(select(m.Lease.id).where(
            m.Lease.status == S.PARKED.value, m.Lease.resume_by <= utcnow_naive(now)).order_by(m.Lease.resume_by)))
    for lease_id in due:
        begin_resume(lc, lease_id, "its held resume slot has come")
    for lease_id in lc.ids(S.RESUMING):
        advance_resuming(lc, lease_id)


def in_flight(lc: Lifecycle) -> bool:
    return bool(lc.ids(S.RESUMING))


# --- resume -------------------------------------------------------------------------------------
def resume_early(session: Session, now: int, settings: planner.PlannerSettings, row: m.Lease,
                 actor: str) -> str:
    """The tenant asks for a parked lease back (in the caller's transaction): the earliest
    slot from now, if moving its held slot there delays no lease planned; else the held slot
    stays. A move that would take a month (a budget's period) past the project's budget, or add
    to one past it, is refused (Forbidden, over_budget) and nothing moves. Returns what was
    done, in words (also in the lease's events)."""
    lock_for_change(session, row)   # the ledger lock, and the lease as it is now
    if row.status != S.PARKED.value:
        raise Conflict(f"lease {row.id} is {row.status}; only a parked lease can be resumed",
                       codes.LEASE_NOT_PARKED)
    assert row.resume_by is not None   # set when it parked
    held_start = to_epoch(row.resume_by)
    inputs = ledger.load_inputs(session, now, settings)
    mine = [h for h in inputs.holds if h.lease_id == row.id]
    others = [h for h in inputs.holds if h.lease_id != row.id]
    s = ledger.settings_for(inputs, settings)
    alone = planner.plan(now, inputs.hosts, others, inputs.quotas, [park.slot_request(row, now)], inputs.usage,
                         s).leases[row.id]
    place = alone.placement
    why = None
    if place is None or place.start >= held_start or alone.borrowing or not mine:
        why = "no sooner slot is free"
    else:
        moved = [dataclasses.replace(mine[0], host=host, start=place.start,
                                     end=held_until(place.end, now, inputs.allowance)) for host in place.hosts]
        before = planner.plan(now, inputs.hosts, inputs.holds, inputs.quotas, inputs.waiting, inputs.usage, s)
        after = planner.plan(now, inputs.hosts, others + moved, inputs.quotas, inputs.waiting, inputs.usage, s)
        delayed = [lease_id for lease_id, p in before.leases.items() if later(after.leases[lease_id], p)]
        if delayed:
            why = f"a sooner slot would delay {len(delayed)} planned lease(s)"
    if why is not None:
        message = f"resume asked: {why}; it keeps its held slot from {rfc3339(held_start)}"
        record_event(session, row, "change", message, now, actor)
        return message
    assert place is not None
    # the tenant moves hours: a slot moved sooner may carry them back into a month (the park's
    # grace carried them out of it) that the project has spent since; refused, nothing moves
    budgets.check_move(session, now, row, Span(row.gpus_per_vm * row.instances, place.start, place.end),
                       f"it keeps its held slot from {rfc3339(held_start)}")
    session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id))
    session.expire(row, ["allocations"])
    park.hold(session, row, alone)
    hosts = ", ".join(sorted(set(place.hosts)))
    if place.start <= now:
        message = f"resume asked: resuming now on {hosts}"
        record_transition(session, row, S.RESUMING, now, actor, message)
    else:
        message = f"resume asked: its slot moved from {rfc3339(held_start)} to {rfc3339(place.start)} on {hosts}"
        record_event(session, row, "change", message, now, actor)
        webhooks.enqueue(session, row, webhooks.PARKED, webhooks.park_payload(row, now, message), now)   # the park's is stale
    return message



def later(after: PlannedLease, before: PlannedLease) -> bool:
    """Whether `after` starts a lease later than `before` did (or no more at all)."""
    if before.placement is None:
        return False
    return after.placement is None or after.placement.start > before.placement.start


def begin_resume(lc: Lifecycle, lease_id: str, why: str) -> None:
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKED)
        # its slot read again under the lock: a drain since the pass read it due may have moved it later
        if row is None or (row.resume_by is not None and to_epoch(row.resume_by) > now):
            return
        # the slot's GPUs still held by a lease ending before it (a slow delete): wait for them
        if held.unreleased_on(session, row, now, lc.planner_settings.release_floor):
            return
        doing = "unshelving its VMs" if any(s.cloud_id for s in row.servers) else "booting its VMs again"
        record_transition(session, row, S.RESUMING, now, ACTOR, f"{why}; {doing} on "
                          + ", ".join(sorted({a.host for a in row.allocations})))
    advance_resuming(lc, lease_id)


def advance_resuming(lc: Lifecycle, lease_id: str) -> None:
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.RESUMING)
        if row is None:
            return
        hosts = {a.vm_index: a.host for a in row.allocations}
        servers = [(s.vm_index, s.cloud_id, s.status) for s in row.servers if s.cloud_id]
        per_host, volume_id = vms_per_host(row), row.volume_id
        overdue = now - entered_at(session, lease_id, S.RESUMING, now) > lc.config.boot_timeout_seconds
    if not servers:
        boot_again(lc, lease_id)
        return
    try:
        if any(old != UNSHELVING and old != "ACTIVE" for _, _, old in servers):
            lc.cloud.set_lease_inventory(lease_id, per_host)   # a unit of its class where its slot is
        states = {}
        for vm_index, cloud_id, old in servers:
            state = lc.cloud.server_state(cloud_id)
            if old == UNSHELVING and shelved(state):
                # Nova places a pinned unshelve after it answers; one it cannot place goes back on
                # the shelf (no task left) and nothing more is said
                retry_resume(lc, lease_id, FailureClass.NO_VALID_HOST, f"the cloud put VM {vm_index} back on "
                             f"the shelf rather than unshelve it on {hosts[vm_index]}", overdue)
                return
            if state.status == park.OFFLOADED and old != UNSHELVING:
                lc.cloud.unshelve(cloud_id, hosts[vm_index])
                lc.set_server(lease_id, vm_index, status=UNSHELVING, host=hosts[vm_index])
                state = lc.cloud.server_state(cloud_id)
            elif state.status in ("ERROR", "DELETED"):
                retry_resume(lc, lease_id, *off_the_shelf(vm_index, state), overdue)
                return
            elif state.status == "ACTIVE" and old != "ACTIVE":
                lc.set_server(lease_id, vm_index, status="ACTIVE", host=state.host or hosts[vm_index])
            states[vm_index] = state
        if not all(s.status == "ACTIVE" for s in states.values()):
            if overdue:
                retry_resume(lc, lease_id, FailureClass.BOOT_TIMEOUT, f"the VMs were not active again within "
                             f"{lc.config.boot_timeout_seconds} s of the unshelve", overdue)
            return
        if volume_id:
            lc.cloud.attach_volume(states[min(states)].id, volume_id)   # no-op: it stayed attached
    except CloudError as exc:
        log.warning("resuming lease %s: %s", lease_id, exc)
        if exc.failure_class in (FailureClass.NO_VALID_HOST, FailureClass.HOST_DOWN) or overdue:
            retry_resume(lc, lease_id, exc.failure_class, exc.message + cloud_said(exc.cloud_message), overdue)
        return
    _resumed(lc, lease_id)


def boot_again(lc: Lifecycle, lease_id: str) -> None:
    """A resuming lease with no VM on the shelf: they were lost with their host while it parked
    (host_failure.parking_on). It is booted again from its image, with its data volume, for its
    time left: planned alone at once, where its slot was if nothing else took it since."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.RESUMING, ledger=True)   # it is planned again below
        if row is None:
            return
        retry.replace(session, row, now, now, avoid=[], settings=lc.planner_settings, actor=ACTOR,
                      duration=retry.unpark_for_boot(row))
        record_event(session, row, "change", "its VMs were lost with their host while it parked, so they are "
                     "booted again from its image" + (" with the data volume" if row.volume_id else "")
                     + f"; the lease is {retry.describe_placement(row, now)}", now, ACTOR)
    lease_flavor.follow_placement(lc, lease_id)


def shelved(state: ServerState) -> bool:
    """On the shelf with nothing under way: a VM that can be unshelved on any host."""
    return state.status == park.OFFLOADED and not state.task


def off_the_shelf(vm_index: int, state: ServerState) -> tuple[FailureClass, str]:
    """The class and words of a VM in ERROR, or gone, while it was being unshelved: gone with
    no fault of its own (by hand, or by a retry the engine stopped in) is an API error, as a
    booting VM gone so is (Lifecycle._watch)."""
    message = f"VM {vm_index} is {state.status} while it was being unshelved" + cloud_said(state.fault)
    if state.status == "DELETED" and not state.fault:
        return FailureClass.API_ERROR, message
    failure = classify_fault(state.fault or f"server {state.id} is {state.status}")
    if failure is FailureClass.IMAGE:
        # the only image an unshelve reads is the VM's shelved snapshot, the cloud's copy of its
        # disk (gone from Glance, or never uploaded), not the lease's image, which still boots
        return FailureClass.API_ERROR, (f"VM {vm_index}'s shelved snapshot could not be read back, so its "
                                        "disk is lost" + cloud_said(state.fault))
    return failure, message


# --- a failed resume, tried again ---------------------------------------------------------------
def retry_resume(lc: Lifecycle, lease_id: str, failure: FailureClass, message: str, overdue: bool) -> None:
    """A resume that failed: tried again elsewhere as a boot is, if the failure's class is the
    host's or the cloud's and the lease has attempts left (domain/failures.py), else it fails.
    Every VM still on the shelf: parked again with its slot moved (park_again). A VM off it
    (unshelved on a host that failed it, in ERROR, gone) cannot be unshelved elsewhere: it alone
    is booted again from the image on another host if the others came off the shelf
    (resume_lost.boot_lost_again), else the lease's VMs are deleted and it is booted again from
    its image with its data volume (retry.retry_elsewhere). `overdue`: resuming past boot_timeout_seconds, so a cloud that
    does not answer here fails it rather than keep it resuming."""
    on_shelf = all_shelved(lc, lease_id)
    if on_shelf is None:
        if overdue:
            park.fail(lc, lease_id, S.RESUMING, message, failure)
        return
    if on_shelf:
        park_again(lc, lease_id, failure, message, overdue)
    elif resume_lost.boot_lost_again(lc, lease_id, failure, message):
        return
    elif not retry.retry_elsewhere(lc, lease_id, failure, message, S.RESUMING):
        park.fail(lc, lease_id, S.RESUMING, message, failure)


def all_shelved(lc: Lifecycle, lease_id: str) -> bool | None:
    """Whether every VM of the resuming lease is on the shelf; None if the lease is not
    resuming or the cloud did not say."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.RESUMING)
        if row is None:
            return None
        cloud_ids = [s.cloud_id for s in row.servers if s.cloud_id]
    try:
        return all(shelved(lc.cloud.server_state(cloud_id)) for cloud_id in cloud_ids)
    except CloudError as exc:
        log.warning("reading the VMs of resuming lease %s: %s", lease_id, exc)
        return None


def park_again(lc: Lifecycle, lease_id: str, failure: FailureClass, message: str, overdue: bool,
               wait: bool = True) -> None:
    """A resuming lease whose VMs are all still on the shelf, its resume failed: parked again,
    its VMs, disks and volume as they were, its slot moved off the hosts that failed it (and
    those that failed it before) from the retry's backoff on, within its failure class's
    attempts (retry.retry_elsewhere's rule); out of them, it fails. `wait` False: its host is
    seen down, and avoided, so there is nothing to wait out (as host_failure.rescue)."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        if lease_in(session, lease_id, S.RESUMING) is None:
            return
        attempt = retry.attempts_so_far(session, lease_id) + 1
    delay = retry_delay(failure, attempt, lc.config.retry_backoff_seconds, lc.config.retry_backoff_max_seconds)
    if delay is None:
        park.fail(lc, lease_id, S.RESUMING, message, failure)
        return
    try:   # no unit of its class anywhere until its slot, as at the park
        lc.cloud.set_lease_inventory(lease_id, {})
    except CloudError as exc:
        log.warning("parking lease %s again: %s", lease_id, exc)
        if overdue:
            park.fail(lc, lease_id, S.RESUMING, message, failure)
        return   # the next pass tries again
    delay = delay if wait else 0
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.RESUMING, ledger=True)   # its slot is planned again below
        if row is None:
            return
        failed_on = sorted({a.host for a in row.allocations})
        retry.record_failure(session, row, failure, message, now, "retried", failed_on, now + delay)
        record_event(session, row, "failure", f"{failure.value}: {message}; {rule(failure).user_message}. "
                     f"Attempt {attempt} of {rule(failure).max_attempts}: its VMs stay on the shelf with their disks and "
                     f"the data volume, and its slot moves off {', '.join(failed_on)}", now, ACTOR)
        for server in row.servers:
            server.status = park.OFFLOADED   # so its next resume unshelves each again
        record_transition(session, row, S.PARKED, now, ACTOR, f"its resume failed ({failure.value}); parked again")
        avoid = sorted(set(failed_on).union(*(f.hosts or [] for f in row.failures)))
        park.move_slot(session, row, now, lc.planner_settings, ACTOR, "change", "its resume failed",
                  earliest=now + delay, avoid=avoid)


def _resumed(lc: Lifecycle, lease_id: str) -> None:
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.RESUMING)
        if row is None:
            return
        hosts = ", ".join(sorted({a.host for a in row.allocations}))
        message = (f"resumed: its {row.instances} VM(s) active again on {hosts}"
                   + (" with the same data volume" if row.volume_id else "")
                   + f"; ends at {rfc3339(to_epoch(row.end_at))}")
        row.parked_at = row.resume_by = row.remaining = None
        row.warned_at = None   # warned again before its (new) end
        retry.idle_starts_over(session, row)   # idle counts from the resume: the spell before it is over
        record_transition(session, row, S.ACTIVE, now, ACTOR, message)
        webhooks.enqueue(session, row, webhooks.RESUMED, webhooks.park_payload(row, now, message), now)

"""Parking an idle lease (an idle rule's `then: park`): its VMs shelved (root disk kept as
a snapshot, data volume attached), its GPUs given back to the queue, and a resume slot held
for the time it had left.

- active -> parking (`begin`): the intent, committed before the cloud is asked to shelve;
  the allocations hold the GPUs until the cloud says every VM is SHELVED_OFFLOADED and its
  GPUs are released.
- parking -> parked (`_parked`): the lease's class inventory removed first (nobody
  unshelves a VM of it outside its slot); then, under the ledger lock, the part it used
  kept (usage.keep_spent) and its allocations replaced by the held slot: its remaining
  time planned as a new lease of its shape would be, after every waiting lease and no
  sooner than `park_grace_seconds` (ledger.held_slot). The slot is a future allocation,
  a hold for every later plan, so waiting leases are planned around it, within the
  project's quota like any future allocation.
- parked -> resuming: at the slot's start (`resume_by`), or on POST .../resume
  (`resume_early`: the earliest slot from now if that delays nobody planned, else the
  held one stays); then the inventory on the slot's hosts and each VM unshelved pinned
  to its slot host (`_advance_resuming`).
- resuming -> active: every VM ACTIVE again with its volume; its idle record starts over.
- A resume that fails for the host's or the cloud's reason is tried again elsewhere, within
  the failure class's attempts, as a boot is (`retry_resume`): parked again with its slot
  moved while every VM is still on the shelf, else booted again from its image.

A lease the tenant boots (`boot: tenant`) is not parked: its servers are the tenant's
(any image, network, Heat stack), so its rule only warns (engine/gpu_activity.py).
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
from gpu_tenancy.db.session import ledger_lock, session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.failures import FailureClass, classify_fault, cloud_said, retry_delay, rule
from gpu_tenancy.domain.held import held_until
from gpu_tenancy.domain.model import LeaseRequest, Placement, PlannedLease
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import held, ledger, retry, webhooks
from gpu_tenancy.engine.events import entered_at, lease_in, record_event, record_transition
from gpu_tenancy.engine.lease_flavor import TENANT, vms_per_host
from gpu_tenancy.engine.leases import end_allocations_at, lock_for_change
from gpu_tenancy.engine.usage import keep_spent
from gpu_tenancy.errors import Conflict
from gpu_tenancy.timeutil import rfc3339, spoken_duration

if TYPE_CHECKING:   # the engine's pass calls in here: imported for the annotations only
    from gpu_tenancy.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
OFFLOADED = "SHELVED_OFFLOADED"
UNSHELVING = "UNSHELVING"   # the server row's status once its unshelve was asked for
MIN_REMAINING = retry.MIN_REMAINING   # a lease parked in its last minute still gets one back, as a re-placed one


def can_park(row: m.Lease) -> bool:
    return row.boot != TENANT


# --- the engine's pass ------------------------------------------------------------------------
def tick(lc: Lifecycle) -> None:
    """Carry parking and resuming leases on, and resume parked ones whose slot has come."""
    for lease_id in lc.ids(S.PARKING):
        advance_parking(lc, lease_id)
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        due = list(session.scalars(select(m.Lease.id).where(
            m.Lease.status == S.PARKED.value, m.Lease.resume_by <= utcnow_naive(now)).order_by(m.Lease.resume_by)))
    for lease_id in due:
        begin_resume(lc, lease_id, "its held resume slot has come")
    for lease_id in lc.ids(S.RESUMING):
        advance_resuming(lc, lease_id)


def in_flight(lc: Lifecycle) -> bool:
    return bool(lc.ids(S.PARKING) or lc.ids(S.RESUMING))


# --- park ---------------------------------------------------------------------------------------
def begin(lc: Lifecycle, lease_id: str, why: str) -> None:
    """Commit the intent (parking, and the time it has left), then shelve."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.ACTIVE)
        if row is None or not can_park(row):
            return
        row.remaining = max(to_epoch(row.end_at) - now, MIN_REMAINING)
        record_transition(session, row, S.PARKING, now, ACTOR,
                          f"{why}; shelving its VMs (disk and data volume kept) to give its GPUs back, "
                          f"{spoken_duration(row.remaining)} of its time kept for a resume slot")
    advance_parking(lc, lease_id)


def advance_parking(lc: Lifecycle, lease_id: str) -> None:
    """Shelve the lease's VMs, and once every one is offloaded with its GPUs released, parked.
    A cloud that has not done it within boot_timeout_seconds of the parking's start (refusing
    each shelve, or never offloading) fails the lease: it would hold its GPUs, parking, past
    its end, with nothing said."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKING)
        if row is None:
            return
        servers = [(s.vm_index, s.cloud_id, s.status) for s in row.servers if s.cloud_id]
        overdue = now - entered_at(session, lease_id, S.PARKING, now) > lc.config.boot_timeout_seconds
    try:
        offloaded = 0
        for vm_index, cloud_id, old in servers:
            state = lc.cloud.server_state(cloud_id)
            if state.status in ("ACTIVE", "SHELVED") and not state.task:   # SHELVED: not offloaded yet
                lc.cloud.shelve(cloud_id)
                state = lc.cloud.server_state(cloud_id)
            if state.status in ("ERROR", "DELETED"):
                fail(lc, lease_id, S.PARKING, f"VM {vm_index} is {state.status} while it was being shelved"
                     + cloud_said(state.fault))
                return
            if state.status != old:
                lc.set_server(lease_id, vm_index, status=state.status)
            if state.status == OFFLOADED and lc.cloud.gpus_released(cloud_id):
                offloaded += 1
        if offloaded < len(servers):
            if overdue:
                fail(lc, lease_id, S.PARKING, f"its VMs were not shelved within {lc.config.boot_timeout_seconds} s "
                     f"({offloaded} of {len(servers)} offloaded with their GPUs given back)")
            return   # the next pass looks again
        # no unit of the lease's class anywhere until its slot: the tenant cannot unshelve it sooner
        lc.cloud.set_lease_inventory(lease_id, {})
    except CloudError as exc:
        log.warning("parking lease %s: %s", lease_id, exc)
        if overdue:
            fail(lc, lease_id, S.PARKING, f"the cloud did not shelve its VMs within {lc.config.boot_timeout_seconds} s: "
                 f"{exc.message}" + cloud_said(exc.cloud_message), exc.failure_class)
        return
    _parked(lc, lease_id)


def _parked(lc: Lifecycle, lease_id: str) -> None:
    with session_scope(lc.sessions) as session:
        ledger_lock(session)
        now = lc.clock.now()   # read under the lock, as a replan does
        row = lease_in(session, lease_id, S.PARKING)
        if row is None:
            return
        remaining = row.remaining or MIN_REMAINING
        keep_spent(session, row, now)   # what it used until now still counts
        session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id))
        session.expire(row, ["allocations"])
        planned = ledger.held_slot(session, row, now, now + lc.config.park_grace_seconds, remaining,
                                   lc.planner_settings)
        if planned.placement is None:   # no enabled host of its model can ever take it back
            end_allocations_at(session, row, now)
            record_transition(session, row, S.ENDING, now, ACTOR, "its VMs are shelved but no host can take "
                              "it back (" + "; ".join(r.message for r in planned.reasons) + "); ending it")
            return
        place = hold(session, row, planned)
        row.parked_at = utcnow_naive(now)
        message = (f"VMs shelved, GPUs given back; {spoken_duration(remaining)} held from "
                   f"{rfc3339(place.start)} on {', '.join(sorted(set(place.hosts)))}: it resumes then, or "
                   "sooner when asked (POST .../resume) if that delays nobody")
        record_transition(session, row, S.PARKED, now, ACTOR, message)
        webhooks.enqueue(session, row, webhooks.PARKED, webhooks.park_payload(row, now, message), now)


def hold(session: Session, row: m.Lease, planned: PlannedLease) -> Placement:
    """The slot as the lease's allocations and `resume_by`. Its start stays the one it
    started at (the waits and ETA figures read it), its end is the slot's, and its duration
    the window between them, so a later change of end reads start + duration right."""
    started = row.start_at
    place = ledger.add_allocations(session, row, planned)
    assert started is not None   # it ran before it parked
    row.start_at, row.resume_by = started, utcnow_naive(place.start)
    row.duration = place.end - to_epoch(started)
    return place


def move_slot(session: Session, row: m.Lease, now: int, settings: planner.PlannerSettings, actor: str,
              kind: str, why: str, *, earliest: int | None = None, avoid: list[str] | None = None) -> None:
    """A parked lease whose held slot is on a host that takes nothing any more (down, drained),
    in the caller's transaction, which holds the ledger lock and then the lease's row: the slot
    planned again alone, from its held start (or `earliest`), before the waiting leases (it
    keeps its place, as a planned lease moved off such a host does), on the hosts that take
    leases, other than `avoid` where another can. If none can ever take it back, it ends, as a
    lease parked with no host to take it back does (_parked). Moved, `lease.parked` goes to the
    project's webhook again with the new resume_by: the one sent at the park is stale."""
    assert row.resume_by is not None   # set when it parked
    held_start = to_epoch(row.resume_by)
    session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id))
    session.expire(row, ["allocations"])
    inputs = ledger.load_inputs(session, now, settings)
    start = max(held_start, now) if earliest is None else earliest
    planned = retry.plan_alone(inputs, now, slot_request(row, start), avoid or [], settings)
    if planned.placement is None:
        record_event(session, row, kind, f"{why}; no host can take it back ("
                     + "; ".join(r.message for r in planned.reasons) + ")", now, actor)
        end_allocations_at(session, row, now)
        record_transition(session, row, S.ENDING, now, actor, "no host can take it back; ending it "
                          "(its shelved VMs are deleted, its data volume kept)")
        return
    place = hold(session, row, planned)
    message = (f"{why}; its held slot moved from {rfc3339(held_start)} to {rfc3339(place.start)} on "
               f"{', '.join(sorted(set(place.hosts)))}: it resumes then")
    record_event(session, row, kind, message, now, actor)
    webhooks.enqueue(session, row, webhooks.PARKED, webhooks.park_payload(row, now, message), now)


# --- resume -------------------------------------------------------------------------------------
def resume_early(session: Session, now: int, settings: planner.PlannerSettings, row: m.Lease,
                 actor: str) -> str:
    """The tenant asks for a parked lease back (in the caller's transaction): the earliest
    slot from now, if moving its held slot there delays no lease planned; else the held slot
    stays. Returns what was done, in words (also in the lease's events)."""
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
    alone = planner.plan(now, inputs.hosts, others, inputs.quotas, [slot_request(row, now)], inputs.usage,
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
    session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id))
    session.expire(row, ["allocations"])
    hold(session, row, alone)
    hosts = ", ".join(sorted(set(place.hosts)))
    if place.start <= now:
        message = f"resume asked: resuming now on {hosts}"
        record_transition(session, row, S.RESUMING, now, actor, message)
    else:
        message = f"resume asked: its slot moved from {rfc3339(held_start)} to {rfc3339(place.start)} on {hosts}"
        record_event(session, row, "change", message, now, actor)
        webhooks.enqueue(session, row, webhooks.PARKED, webhooks.park_payload(row, now, message), now)   # the park's is stale
    return message


def slot_request(row: m.Lease, earliest: int) -> LeaseRequest:
    return dataclasses.replace(ledger.request_from_row(row), duration=row.remaining or MIN_REMAINING,
                               earliest_start=earliest, latest_start=None, first_eta=None, guarded=False)


def later(after: PlannedLease, before: PlannedLease) -> bool:
    """Whether `after` starts a lease later than `before` did (or no more at all)."""
    if before.placement is None:
        return False
    return after.placement is None or after.placement.start > before.placement.start


def begin_resume(lc: Lifecycle, lease_id: str, why: str) -> None:
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKED)
        if row is None:
            return
        # the slot's GPUs still held by a lease ending before it (a slow delete): wait for them
        if held.unreleased_on(session, row, now, lc.planner_settings.release_floor):
            return
        record_transition(session, row, S.RESUMING, now, ACTOR, f"{why}; unshelving its VMs on "
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
            if state.status == OFFLOADED and old != UNSHELVING:
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


def shelved(state: ServerState) -> bool:
    """On the shelf with nothing under way: a VM that can be unshelved on any host."""
    return state.status == OFFLOADED and not state.task


def off_the_shelf(vm_index: int, state: ServerState) -> tuple[FailureClass, str]:
    """The class and words of a VM in ERROR, or gone, while it was being unshelved: gone with
    no fault of its own (by hand, or by a retry the engine stopped in) is an API error, as a
    booting VM gone so is (Lifecycle._watch)."""
    message = f"VM {vm_index} is {state.status} while it was being unshelved" + cloud_said(state.fault)
    if state.status == "DELETED" and not state.fault:
        return FailureClass.API_ERROR, message
    return classify_fault(state.fault or f"server {state.id} is {state.status}"), message


def retry_resume(lc: Lifecycle, lease_id: str, failure: FailureClass, message: str, overdue: bool) -> None:
    """A resume that failed: tried again elsewhere as a boot is, if the failure's class is the
    host's or the cloud's and the lease has attempts left (domain/failures.py), else it fails.
    Every VM still on the shelf: parked again with its slot moved (park_again). A VM off it
    (unshelved on a host that failed it, in ERROR, gone) cannot be unshelved elsewhere: the
    lease's VMs are deleted and it is booted again from its image with its data volume
    (retry.retry_elsewhere). `overdue`: resuming past boot_timeout_seconds, so a cloud that
    does not answer here fails it rather than keep it resuming."""
    on_shelf = all_shelved(lc, lease_id)
    if on_shelf is None:
        if overdue:
            fail(lc, lease_id, S.RESUMING, message, failure)
        return
    if on_shelf:
        park_again(lc, lease_id, failure, message, overdue)
    elif not retry.retry_elsewhere(lc, lease_id, failure, message, S.RESUMING):
        fail(lc, lease_id, S.RESUMING, message, failure)


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
        fail(lc, lease_id, S.RESUMING, message, failure)
        return
    try:   # no unit of its class anywhere until its slot, as at the park
        lc.cloud.set_lease_inventory(lease_id, {})
    except CloudError as exc:
        log.warning("parking lease %s again: %s", lease_id, exc)
        if overdue:
            fail(lc, lease_id, S.RESUMING, message, failure)
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
            server.status = OFFLOADED   # so its next resume unshelves each again
        record_transition(session, row, S.PARKED, now, ACTOR, f"its resume failed ({failure.value}); parked again")
        avoid = sorted(set(failed_on).union(*(f.hosts or [] for f in row.failures)))
        move_slot(session, row, now, lc.planner_settings, ACTOR, "change", "its resume failed",
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
        activity = session.get(m.LeaseActivity, row.id)
        if activity is not None:   # idle counts from the resume: the spell before it is over
            session.delete(activity)
        record_transition(session, row, S.ACTIVE, now, ACTOR, message)
        webhooks.enqueue(session, row, webhooks.RESUMED, webhooks.park_payload(row, now, message), now)


def fail(lc: Lifecycle, lease_id: str, expected: LeaseState, message: str,
         failure: FailureClass = FailureClass.API_ERROR) -> None:
    """A VM the cloud would not shelve, or a resume not to be tried again: the lease fails and ends
    (volume kept), its failure history saying so."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, expected)
        if row is None:
            return
        row.failure_class, row.failure_message = failure.value, message
        retry.record_failure(session, row, failure, message, now, "failed", retry.lease_hosts(row))
        record_event(session, row, "failure", f"{failure.value}: {message}; {rule(failure).user_message}", now, ACTOR)
        end_allocations_at(session, row, now)
        record_transition(session, row, S.ENDING, now, ACTOR, f"failed while {expected.value}; removing its VMs")
    lc.finish_end(lease_id)

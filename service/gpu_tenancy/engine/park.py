"""Parking an idle lease (an idle rule's `then: park`): its VMs shelved (root disk kept as
a snapshot, data volume attached), its GPUs given back to the queue, and a resume slot held
for the time it had left. Its resume, at that slot or sooner, is engine/resume.py.

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
- The held slot moved (`move_slot`): its host down or drained, or its resume failed.
- VMs the cloud did not shelve within boot_timeout_seconds: deleted, and the lease parks without
  them (`without_vms`), as when their host goes down while they are shelved.
- A VM in ERROR or gone while shelved, or a resume not to be tried again, fails the lease (`fail`).

A lease the tenant boots (`boot: tenant`) is not parked: its servers are the tenant's
(any image, network, Heat stack), so its rule only warns (engine/gpu_activity.py).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from sqlalchemy import delete
from sqlalchemy.orm import Session

from gpu_tenancy.cloud.driver import SHELVABLE, CloudError
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.failures import FailureClass, cloud_said, rule
from gpu_tenancy.domain.model import LeaseRequest, Placement, PlannedLease
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import ledger, retry, webhooks
from gpu_tenancy.engine.events import StillSo, entered_at, lease_in, record_event, record_transition
from gpu_tenancy.engine.lease_flavor import TENANT
from gpu_tenancy.engine.leases import end_allocations_at
from gpu_tenancy.engine.usage import keep_spent
from gpu_tenancy.timeutil import rfc3339, spoken_duration

if TYPE_CHECKING:   # the engine's pass calls in here: imported for the annotations only
    from gpu_tenancy.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
OFFLOADED = "SHELVED_OFFLOADED"
SHELVE_FROM = (*SHELVABLE, "SHELVED")   # SHELVED: shelved, not offloaded yet
MIN_REMAINING = retry.MIN_REMAINING   # a lease parked in its last minute still gets one back, as a re-placed one


def can_park(row: m.Lease) -> bool:
    """Not a tenant-booted lease (its servers are the tenant's), nor one under a reclaim or
    preemption notice: it ends at the notice anyway, and parked it would keep the notice and be
    ended the moment it resumed."""
    return row.boot != TENANT and row.early_end_at is None


# --- the engine's pass ------------------------------------------------------------------------
def tick(lc: Lifecycle) -> None:
    """Carry parking leases on: shelved, then parked (their GPUs to the queue)."""
    for lease_id in lc.ids(S.PARKING):
        advance_parking(lc, lease_id)


def in_flight(lc: Lifecycle) -> bool:
    return bool(lc.ids(S.PARKING))


# --- park ---------------------------------------------------------------------------------------
def begin(lc: Lifecycle, lease_id: str, why: str, still: StillSo | None = None) -> None:
    """Commit the intent (parking, and the time it has left), then shelve. `still`: the reason
    it parks, asked again under the lease's lock (Lifecycle.begin_end's)."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.ACTIVE)
        if row is None or not can_park(row) or (still is not None and not still(session, row, now)):
            return
        row.remaining = max(to_epoch(row.end_at) - now, MIN_REMAINING)
        record_transition(session, row, S.PARKING, now, ACTOR,
                          f"{why}; shelving its VMs (disk and data volume kept) to give its GPUs back, "
                          f"{spoken_duration(row.remaining)} of its time kept for a resume slot")
    advance_parking(lc, lease_id)


def advance_parking(lc: Lifecycle, lease_id: str) -> None:
    """Shelve the lease's VMs, and once every one is offloaded with its GPUs released, parked.
    A cloud that has not done it within boot_timeout_seconds of the parking's start (refusing
    each shelve, a VM in a task of its tenant's, never offloading): its VMs are deleted and it
    parks without them (without_vms), rather than hold its GPUs, parking, past its end. A VM in
    ERROR or gone before then fails the lease."""
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKING)
        if row is None:
            return
        servers = [(s.vm_index, s.cloud_id, s.status) for s in row.servers if s.cloud_id]
        overdue = now - entered_at(session, lease_id, S.PARKING, now) > lc.config.boot_timeout_seconds
    refused: CloudError | None = None
    try:
        offloaded = 0
        for vm_index, cloud_id, old in servers:
            state = lc.cloud.server_state(cloud_id)
            # SHELVED: not offloaded yet; SHUTOFF, PAUSED, SUSPENDED: stopped by its tenant, which
            # Nova shelves as it does an ACTIVE one (and unshelves ACTIVE)
            if state.status in SHELVE_FROM and not state.task:
                lc.cloud.shelve(cloud_id)
                state = lc.cloud.server_state(cloud_id)
            if state.status in ("ERROR", "DELETED") and not overdue:   # overdue: deleted by without_vms
                fail(lc, lease_id, S.PARKING, f"VM {vm_index} is {state.status} while it was being shelved"
                     + cloud_said(state.fault))
                return
            if state.status != old:
                lc.set_server(lease_id, vm_index, status=state.status)
            if state.status == OFFLOADED and lc.cloud.gpus_released(cloud_id):
                offloaded += 1
        if offloaded == len(servers):
            # no unit of the lease's class anywhere until its slot: the tenant cannot unshelve it sooner
            lc.cloud.set_lease_inventory(lease_id, {})
            _parked(lc, lease_id)
            return
    except CloudError as exc:
        log.warning("parking lease %s: %s", lease_id, exc)
        refused = exc
    if overdue:
        said = (f": {refused.message}" + cloud_said(refused.cloud_message) if refused is not None
                else f" ({offloaded} of {len(servers)} offloaded with their GPUs given back)")
        without_vms(lc, lease_id, refused.failure_class if refused is not None else FailureClass.API_ERROR,
                    f"the cloud did not shelve its VMs within {lc.config.boot_timeout_seconds} s{said}")
    # else the next pass looks again


def without_vms(lc: Lifecycle, lease_id: str, failure: FailureClass, message: str, *,
                failed_on: list[str] | None = None, kind: str = "failure",
                done: str = "its VMs deleted, GPUs given back") -> bool:
    """A parking lease whose VMs cannot be shelved (not within boot_timeout_seconds, or their host
    went down: host_failure.parking_on): every VM of it deleted (a resume unshelves all of a lease's
    VMs or boots all of them again: it cannot mix the two), its class's inventory removed (as at a
    park: nobody boots it outside its slot), and it parks at once, its time left and data volume
    kept; at its resume it is booted again from its image (resume.boot_again). A failure history
    row says why (`failed_on`: its hosts, by default all of them). The cloud refusing a delete or
    the inventory: the next pass tries again. True once parked (or ended: no host to take it back)."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKING)
        if row is None:
            return False
        cloud_ids = [s.cloud_id for s in row.servers if s.cloud_id]
    unrecorded = retry.delete_every_server(lc.cloud, lease_id, cloud_ids)
    if unrecorded is None:
        return False
    try:
        lc.cloud.set_lease_inventory(lease_id, {})
    except CloudError as exc:
        log.warning("parking lease %s without its VMs: %s", lease_id, exc)
        return False   # the next pass tries again (its VMs are gone already)
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PARKING, ledger=True)   # its slot is planned below
        if row is None:
            return False
        retry.record_failure(session, row, failure, message, now, "replaced",
                             retry.lease_hosts(row) if failed_on is None else failed_on)
        retry.record_unrecorded(session, row, unrecorded, now)
        retry.drop_servers(session, row, now)   # VMs still being deleted hold their GPUs till released
        session.flush()
        session.expire(row, ["servers"])
        record_event(session, row, kind, f"{message}. It parks without its VMs: when it resumes, they "
                     "are booted again from its image" + (" with the data volume" if row.volume_id else ""),
                     now, ACTOR)
        settle(session, row, now, lc.config.park_grace_seconds, lc.planner_settings, done)
    return True


def _parked(lc: Lifecycle, lease_id: str) -> None:
    with session_scope(lc.sessions) as session:
        ledger_lock(session)
        now = lc.clock.now()   # read under the lock, as a replan does
        row = lease_in(session, lease_id, S.PARKING)
        if row is None:
            return
        settle(session, row, now, lc.config.park_grace_seconds, lc.planner_settings, "VMs shelved, GPUs given back")


def settle(session: Session, row: m.Lease, now: int, grace: int, settings: planner.PlannerSettings,
           done: str) -> None:
    """The parking lease parked, in the caller's transaction under the ledger lock: the part it
    used kept, its allocations replaced by the held slot (its time left, after every waiting lease,
    no sooner than `grace`), or ended if no host can ever take it back. `done`: what became of
    its VMs, in words, first in its event and notice."""
    remaining = row.remaining or MIN_REMAINING
    keep_spent(session, row, now)   # what it used until now still counts
    session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id))
    session.expire(row, ["allocations"])
    planned = ledger.held_slot(session, row, now, now + grace, remaining, settings)
    if planned.placement is None:   # no enabled host of its model can ever take it back
        end_allocations_at(session, row, now)
        record_transition(session, row, S.ENDING, now, ACTOR, f"{done} but no host can take it back ("
                          + "; ".join(r.message for r in planned.reasons) + "); ending it")
        return
    place = hold(session, row, planned)
    row.parked_at = utcnow_naive(now)
    message = (f"{done}; {spoken_duration(remaining)} held from "
               f"{rfc3339(place.start)} on {', '.join(sorted(set(place.hosts)))}: it resumes then, or "
               "sooner when asked (POST .../resume) if that delays nobody")
    record_transition(session, row, S.PARKED, now, ACTOR, message)
    webhooks.enqueue(session, row, webhooks.PARKED, webhooks.park_payload(row, now, message), now)


# --- the held slot ----------------------------------------------------------------------------
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


def slot_request(row: m.Lease, earliest: int) -> LeaseRequest:
    return dataclasses.replace(ledger.request_from_row(row), duration=row.remaining or MIN_REMAINING,
                               earliest_start=earliest, latest_start=None, first_eta=None, guarded=False)


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

"""A resume that lost some of a lease's VMs, not all (engine/resume.py retry_resume): the VMs
that left the shelf and failed (in ERROR, or gone) cannot be unshelved again, but the others
came, or are coming, off the shelf with their disks. Only the lost ones are deleted and booted
again from the image, each on a host that did not fail the lease, from now to the lease's
end; the lease goes on as a provisioning one (Lifecycle._advance boots the VMs it has no
server for and watches them all), so the VMs that were unshelved keep their root disks. When
that cannot be done (one VM only, every VM lost, a VM put back on the shelf or not yet asked
for, no host free for the lost ones now), the caller boots the whole lease again, as before."""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from sqlalchemy import delete

from gpu_tenancy.cloud.driver import CloudError, ServerState
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.failures import FailureClass, retry_delay, rule
from gpu_tenancy.domain.model import LeaseRequest, Placement
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import lease_flavor, ledger, releasing, retry
from gpu_tenancy.engine.park import OFFLOADED
from gpu_tenancy.engine.events import lease_in, record_event, record_transition

if TYPE_CHECKING:
    from gpu_tenancy.engine.lifecycle import Lifecycle

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
LOST = ("ERROR", "DELETED")
UNSHELVING = "UNSHELVING"   # resume.py's row status (resume.py imports this module)


class NoPlaceNow(Exception):
    """The lost VMs fit nowhere from now: the transaction that looked is rolled back."""


def boot_lost_again(lc: Lifecycle, lease_id: str, failure: FailureClass, message: str) -> bool:
    """True if the lease's lost VMs are to be booted again alone (or the cloud refused their
    delete: the next pass sees them again); False if the caller must boot the whole lease again."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.RESUMING)
        if row is None:
            return True
        servers = [(s.vm_index, s.cloud_id, s.status) for s in row.servers if s.cloud_id]
        attempt = retry.attempts_so_far(session, lease_id) + 1
    if len(servers) < 2 or retry_delay(failure, attempt, lc.config.retry_backoff_seconds,
                                       lc.config.retry_backoff_max_seconds) is None:
        return False
    try:
        states = {vm_index: lc.cloud.server_state(cloud_id) for vm_index, cloud_id, _ in servers}
    except CloudError as exc:
        log.warning("reading the VMs of resuming lease %s: %s", lease_id, exc)
        return False
    lost = sorted(i for i, state in states.items() if state.status in LOST)
    if not lost or len(lost) == len(servers) or not all(
            coming_off(old, states[i]) for i, _, old in servers if i not in lost):
        return False
    if not retry.delete_servers(lc.cloud, [states[i].id for i in lost]):
        return True
    try:
        with session_scope(lc.sessions) as session:
            row = lease_in(session, lease_id, S.RESUMING, ledger=True)   # allocations change below
            if row is None:
                return True
            now = lc.clock.now()
            failed_on = sorted({a.host for a in row.allocations if a.vm_index in lost})
            place = place_lost(session, row, lost, now, lc.planner_settings)
            move_lost(session, row, lost, place, now)
            entry = retry.record_failure(session, row, failure, message, now, "retried", failed_on)
            kept = [i for i, _, _ in servers if i not in lost]
            where = ", ".join(f"VM {i} on {h}" for i, h in zip(lost, place.hosts))
            record_event(session, row, "failure",
                         f"{failure.value}: {message}; {rule(failure).user_message}. Attempt {entry.attempt} of "
                         f"{rule(failure).max_attempts}: booted again from its image, {where}"
                         + (", the data volume attached to it again" if row.volume_id and 0 in lost else "")
                         + f"; {'VMs' if len(kept) > 1 else 'VM'} {', '.join(map(str, kept))} "
                         f"{'keep their disks' if len(kept) > 1 else 'keeps its disk'}", now, ACTOR)
            unpark(session, row)
            record_transition(session, row, S.PROVISIONING, now, ACTOR,
                              f"{len(lost)} VM(s) lost off the shelf, booted again from its image; "
                              f"{len(kept)} unshelved")
    except NoPlaceNow:
        return False
    lease_flavor.follow_placement(lc, lease_id)   # its class's inventory where the lost VMs go
    log.info("resuming lease %s: VM(s) %s booted again from its image", lease_id, lost)
    return True


def coming_off(row_status: str, state: ServerState) -> bool:
    """A VM that is off the shelf, or on its way: asked to unshelve and not put back."""
    if state.status == "ACTIVE":
        return True
    return row_status == UNSHELVING and state.status not in LOST and not (state.status == OFFLOADED
                                                                           and not state.task)


def place_lost(session, row: m.Lease, lost: list[int], now: int, settings: planner.PlannerSettings) -> Placement:
    """Where the lost VMs go from now to the lease's end, on hosts that have not failed it,
    counted against the ledger with the lease's other VMs where they are."""
    assert row.end_at is not None   # a resuming lease has its slot's end
    end = to_epoch(row.end_at)
    failed = {a.host for a in row.allocations if a.vm_index in lost}.union(*(f.hosts or [] for f in row.failures))
    session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id, m.Allocation.vm_index.in_(lost)))
    session.flush()
    session.expire(row, ["allocations"])
    if end <= now:
        raise NoPlaceNow
    inputs = ledger.load_inputs(session, now, settings)
    request = LeaseRequest(lease_id=f"{row.id}/lost", project_id=row.project_id, gpu_model=row.gpu_model,
                           gpus_per_vm=row.gpus_per_vm, instances=len(lost), duration=end - now,
                           earliest_start=now, latest_start=now, created_at=to_epoch(row.created_at),
                           priority=row.priority, name=row.name, preemptible=row.preemptible)
    hosts = [dataclasses.replace(h, enabled=False) if h.name in failed else h for h in inputs.hosts]
    planned = planner.plan(now, hosts, inputs.holds, inputs.quotas, [request], inputs.usage,
                           ledger.settings_for(inputs, settings)).leases[request.lease_id]
    if planned.placement is None or planned.placement.start > now:
        raise NoPlaceNow
    return Placement(now, end, planned.placement.hosts)


def move_lost(session, row: m.Lease, lost: list[int], place: Placement, now: int) -> None:
    """The lost VMs off the record (their GPUs held until the cloud has released them) and
    their new allocations, each with a server row to boot."""
    gone = [s for s in row.servers if s.vm_index in lost]
    releasing.keep(session, row, now, gone)
    for server in gone:
        session.delete(server)
    session.flush()   # the rows gone before their VM index's new one is written
    for vm_index, host in zip(lost, place.hosts):
        session.add(m.Allocation(lease_id=row.id, project_id=row.project_id, vm_index=vm_index, host=host,
                                 gpu_model=row.gpu_model, gpus=row.gpus_per_vm, start_at=utcnow_naive(place.start),
                                 end_at=utcnow_naive(place.end), borrowing=row.borrowing))
        session.add(m.Server(lease_id=row.id, vm_index=vm_index, host=host, status="REQUESTED",
                             updated_at=utcnow_naive(now)))
    session.flush()
    session.expire(row, ["servers", "allocations"])


def unpark(session, row: m.Lease) -> None:
    """Its park over, as at a resume (resume._resumed); a boot that fails from here is tried
    again with the time it had left (retry.retry_elsewhere plans a provisioning lease for its duration)."""
    row.duration = retry.unpark_for_boot(row)   # its warning before the old end cleared too
    retry.idle_starts_over(session, row)   # idle counts from the resume

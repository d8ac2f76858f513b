"""A lease's own flavor and resource class (issue 17): the steps of starting and
ending a lease that make the cloud itself refuse a boot outside it.

Start (after the PROVISIONING intent is committed): the class, then its inventory
on the planned hosts (one unit per VM planned there), then the flavor, whose id and
name the lease keeps. The tenant's project gets access to the flavor only as the
lease becomes ACTIVE (grant, then commit). End (after the ENDING intent): revoke,
delete every server of the lease (the service's and the tenant's own), wait for
their GPUs, then remove the inventory, the flavor and the class, in that order: a
crash at any step leaves a state the next pass carries on from (every call is
idempotent), and reconcile removes what a finished or unknown lease left.

A "tenant" lease boots nothing itself: while it is ACTIVE, each pass records the
servers its members booted with the flavor as the lease's servers. One a member resized off
the flavor is no longer the lease's: engine/resized.py says which are kept at the end.
"""
from __future__ import annotations

import logging
from collections import Counter

from sqlalchemy import func, select

from gpu_tenancy.cloud.driver import CloudError, ServerState, ShapeSpec
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.domain.states import FINAL, LeaseState
from gpu_tenancy.engine import resized, webhooks
from gpu_tenancy.engine.crashpoints import crash_point
from gpu_tenancy.engine.leases import finished_or_unknown
from gpu_tenancy.engine.events import lease_in, record_event, record_transition

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"
TENANT = "tenant"
GONE = ("DELETED",)


def vms_per_host(row: m.Lease) -> dict[str, int]:
    return dict(Counter(a.host for a in row.allocations))


def prepare(lc, lease_id: str) -> str | None:
    """Class, inventory, flavor for a PROVISIONING lease; returns the flavor's id (None if
    the lease is no longer provisioning). CloudError goes to the caller (advance)."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PROVISIONING)
        if row is None:
            return None
        shape = session.get_one(m.Shape, row.shape)
        spec = ShapeSpec(shape.name, shape.gpu_model, shape.gpus, shape.vcpus, shape.ram_mb, shape.disk_gb,
                         shape.pci_alias)
        project, hosts = row.project_id, vms_per_host(row)
    lc.cloud.ensure_lease_class(lease_id)
    crash_point("class_made")
    lc.cloud.set_lease_inventory(lease_id, hosts)
    crash_point("inventory_set")
    flavor = lc.cloud.ensure_lease_flavor(lease_id, project, spec)
    with session_scope(lc.sessions) as session:
        row = session.get_one(m.Lease, lease_id)
        if (row.flavor_id, row.flavor_name) != (flavor.id, flavor.name):
            row.flavor_id, row.flavor_name = flavor.id, flavor.name
            record_event(session, row, "progress", f"flavor {flavor.name} ({flavor.id}) ready: one unit of "
                         f"{flavor.resource_class} on " + ", ".join(f"{h} ({n})" for h, n in sorted(hosts.items())),
                         lc.clock.now(), ACTOR)
    crash_point("flavor_made")
    return flavor.id


def activate(lc, lease_id: str, why: str) -> None:
    """Give the tenant's project the flavor, then commit ACTIVE."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PROVISIONING)
        if row is None:
            return
        project = row.project_id
    lc.cloud.grant_lease_flavor(lease_id, project)
    crash_point("access_granted")
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.PROVISIONING)   # not if a cancel ended it meanwhile
        if row is not None:
            now = lc.clock.now()
            back = parked_since_active(session, lease_id)
            record_transition(session, row, S.ACTIVE, now, ACTOR, why)
            if back:   # its resume failed and it was booted again: the webhook told it parked hears it is back
                webhooks.enqueue(session, row, webhooks.RESUMED, webhooks.park_payload(
                    row, now, f"resumed, booted again from its image after its resume failed: {why}"), now)


def parked_since_active(session, lease_id: str) -> bool:
    """Whether the lease parked after it was last active."""
    last = dict(session.execute(
        select(m.Event.to_state, func.max(m.Event.id)).where(
            m.Event.lease_id == lease_id, m.Event.to_state.in_([S.PARKED.value, S.ACTIVE.value]))
        .group_by(m.Event.to_state)).tuples().all())
    return last.get(S.PARKED.value, 0) > last.get(S.ACTIVE.value, 0)


def teardown(lc, lease_id: str) -> bool:
    """The end of an ENDING lease in the cloud; True once nothing of it is left (its GPUs
    released, its inventory, flavor and class gone). False: the next pass tries again."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.ENDING)
        if row is None:
            return False
        project, tenant, flavor_id = row.project_id, row.boot == TENANT, row.flavor_id
        servers = [(s.vm_index, s.cloud_id, s.status) for s in row.servers]
    try:
        lc.cloud.revoke_lease_flavor(lease_id, project)
        crash_point("access_revoked")
        listed = lc.cloud.lease_servers(lease_id)   # after the revoke: no member boots one more
        on_flavor = {state.id for state in listed}
        remaining, to_confirm = 0, []
        for vm_index, cloud_id, status in servers:
            if cloud_id is None or (status in GONE and not tenant):
                continue
            if tenant and cloud_id not in on_flavor:
                # resized by its member off the lease's flavor (since the last pass, or seen then and
                # recorded gone): kept or deleted by the flavor it is on now, as engine/resized.py says
                state = lc.cloud.server_state(cloud_id)
                fate = resized.fate(state, lease_id, flavor_id)
                if fate in (resized.Fate.RELEASED, resized.Fate.CONFIRM):
                    if status not in GONE:
                        release(lc, lease_id, vm_index, state)
                    if fate is resized.Fate.CONFIRM:
                        to_confirm.append(cloud_id)
                    continue
                if fate is resized.Fate.ESCAPED:
                    if state.task != "deleting":
                        lc._note(lease_id, "progress", resized.escaped(state))
                elif status in GONE:
                    continue   # gone; or back on the lease's flavor, and deleted below as listed
            elif status in GONE:
                continue
            try:
                lc.cloud.delete_server(cloud_id)
                crash_point("delete_requested")
                if lc.cloud.server_state(cloud_id).status == "DELETED" and lc.cloud.gpus_released(cloud_id):
                    lc.set_server(lease_id, vm_index, status="DELETED")
                else:
                    remaining += 1
            except CloudError as exc:
                log.warning("deleting server %s of lease %s: %s", cloud_id, lease_id, exc)
                remaining += 1
        # a server recorded gone may be back (a member's resize reverted, a soft delete restored): every
        # server the cloud finds with the lease's flavor goes, save those just asked for above
        known = {cloud_id for _, cloud_id, status in servers if status not in GONE}
        for state in listed:   # booted by the tenant since the last pass
            if state.id not in known:
                lc.cloud.delete_server(state.id)
                remaining += 1
        if remaining:
            return False
        if not lc.cloud.remove_lease_inventory(lease_id):
            confirm_resized(lc, lease_id, to_confirm if tenant else [
                cloud_id for _, cloud_id, status in servers if cloud_id is not None and status in GONE])
            return False
        crash_point("inventory_removed")
        lc.cloud.remove_lease_flavor(lease_id)
        lc.cloud.remove_lease_class(lease_id)
    except CloudError as exc:
        log.warning("ending lease %s in the cloud: %s", lease_id, exc)
        return False
    return True


def release(lc, lease_id: str, vm_index: int, state: ServerState) -> None:
    """The server, resized off the lease's flavor, off the lease's record (recorded gone: the
    lease's GPUs it held are not held for it), with an event saying so."""
    lc.set_server(lease_id, vm_index, status="DELETED")
    lc._note(lease_id, "progress", resized.released(state))


def confirm_resized(lc, lease_id: str, gone: list[str]) -> None:
    """An ending lease whose inventory a server still holds though every server of it is gone:
    one its tenant resized to another flavor and did not confirm (VERIFY_RESIZE). Its flavor is
    not the lease's, so it was recorded gone, but the old flavor's claim, the lease's GPUs and
    unit, stays until the resize is confirmed or reverted: the lease stayed ending, its GPUs
    taken, for as long as its tenant left it so. Confirmed here (what the tenant asked, the
    server kept on its new flavor), which releases them. CloudError goes to the caller."""
    for cloud_id in gone:
        if lc.cloud.server_state(cloud_id).status == "VERIFY_RESIZE":
            lc.cloud.confirm_resize(cloud_id)
            lc._note(lease_id, "progress", f"server {cloud_id}, resized by its project off the lease's flavor "
                     "and not confirmed, is confirmed at the lease's end: it stays on its new flavor, and "
                     "the lease's GPUs it still held are released")


def remove_leftovers(lc, lease_id: str, project_id: str | None) -> bool | None:
    """What a finished or unknown lease left in the cloud (a crash): its servers, then
    inventory, flavor and class (the next reconcile finishes once the GPUs are released).
    True once nothing is left; False while its GPUs are being released; None: the cloud refused."""
    try:
        if project_id:
            lc.cloud.revoke_lease_flavor(lease_id, project_id)
        for state in lc.cloud.lease_servers(lease_id):
            log.info("reconcile: deleting server %s of finished lease %s", state.id, lease_id)
            lc.cloud.delete_server(state.id)
        if lc.cloud.remove_lease_inventory(lease_id):
            lc.cloud.remove_lease_flavor(lease_id)
            lc.cloud.remove_lease_class(lease_id)
            return True
    except CloudError as exc:
        log.warning("reconcile: removing what lease %s left: %s", lease_id, exc)
        return None
    return False


# while the cloud keeps refusing to remove a lease's leftovers: the first wait between two tries,
# doubled at each refusal up to the last (each try is several API calls and a warning, and both
# the pass below and the reconcile would try)
LEFTOVER_WAIT, LEFTOVER_WAIT_MAX = 10, 600


def try_removal(lc, lease_id: str, project_id: str | None) -> bool:
    """remove_leftovers, unless the cloud refused it too lately (lc.leftover_tries: lease id ->
    (refusals, next try)); True once nothing is left. (A removal waiting on its GPUs' release
    is not refused: it is tried again at the next pass.)"""
    now, tries = lc.clock.now(), lc.leftover_tries
    refused, due = tries.get(lease_id, (0, now))
    if due > now:
        return False
    removed = remove_leftovers(lc, lease_id, project_id)
    if removed is None:
        tries[lease_id] = (refused + 1, now + min(LEFTOVER_WAIT * 2 ** refused, LEFTOVER_WAIT_MAX))
        return False
    tries.pop(lease_id, None)   # gone, or its GPUs on their way back: the next pass looks again
    return removed


def remove_unstarted(lc) -> None:
    """A lease sent back to wait after a failed boot keeps its class, inventory where it is
    planned next, and flavor (follow_placement); cancelled or expired so, it never goes
    through ENDING. Removed in the engine's next pass, not at the next reconcile, so that no
    class has inventory outside its lease's window. The flavor id is cleared once they are
    gone: what is left to do is the leases of these states that still have one."""
    with session_scope(lc.sessions) as session:
        rows = session.execute(select(m.Lease.id, m.Lease.project_id).where(
            m.Lease.status.in_((S.CANCELLED.value, S.EXPIRED.value)), m.Lease.flavor_id.is_not(None))).all()
    for lease_id, project in rows:
        if try_removal(lc, lease_id, project):
            with session_scope(lc.sessions) as session:
                row = session.get_one(m.Lease, lease_id)
                row.flavor_id = row.flavor_name = None


def reconcile(lc) -> None:
    now = lc.clock.now()
    for lease_id, (_refused, due) in list(lc.leftover_tries.items()):   # tried by no one since: gone
        if due < now - LEFTOVER_WAIT_MAX:
            del lc.leftover_tries[lease_id]
    try:
        in_cloud = lc.cloud.leases_in_cloud()
    except CloudError as exc:
        log.warning("reconcile: listing lease flavors failed: %s", exc)
        return
    with session_scope(lc.sessions) as session:
        over = finished_or_unknown(session, in_cloud)
    for lease_id in sorted(over):
        try_removal(lc, lease_id, over[lease_id])


def follow_placement(lc, lease_id: str) -> None:
    """After a re-placement: the lease's inventory where it is now planned (none while it
    waits in the queue), and no access for the tenant until it is ACTIVE again."""
    pending = lc.placements_to_follow if lc.placements_to_follow is not None else set()
    with session_scope(lc.sessions) as session:
        row = session.get(m.Lease, lease_id)
        if row is None or row.flavor_id is None or row.status in {s.value for s in FINAL}:
            pending.discard(lease_id)   # its end removes what it has
            return
        project, hosts, active = row.project_id, vms_per_host(row), row.status == S.ACTIVE.value
    try:
        if not active:
            lc.cloud.revoke_lease_flavor(lease_id, project)
        lc.cloud.set_lease_inventory(lease_id, hosts)
    except CloudError as exc:   # tried again at every pass (follow_pending): a tenant kept its access meanwhile
        log.warning("moving the inventory of lease %s: %s", lease_id, exc)
        pending.add(lease_id)
        return
    pending.discard(lease_id)


def follow_pending(lc) -> None:
    """The re-placements the cloud has not followed yet, again: a lease moved off its hosts
    keeps no access nor unit there (a tenant with the lease's flavor would boot outside the
    ledger, on GPUs it gives to others). After a start, every waiting lease that has a flavor
    (it was placed before) is looked at once."""
    if lc.placements_to_follow is None:
        with session_scope(lc.sessions) as session:
            lc.placements_to_follow = set(session.scalars(select(m.Lease.id).where(
                m.Lease.status.in_((S.QUEUED.value, S.SCHEDULED.value)), m.Lease.flavor_id.is_not(None))))
    for lease_id in sorted(lc.placements_to_follow):
        follow_placement(lc, lease_id)


def record_tenant_servers(lc) -> None:
    """The servers the members of each ACTIVE tenant lease booted, as the lease's servers:
    one event per server seen and per server gone."""
    with session_scope(lc.sessions) as session:
        ids = list(session.scalars(select(m.Lease.id).where(m.Lease.status == S.ACTIVE.value,
                                                           m.Lease.boot == TENANT)))
    for lease_id in ids:
        record_servers(lc, lease_id)


def record_servers(lc, lease_id: str) -> None:
    """One ACTIVE tenant lease's servers as its Server rows (no-op for any other lease):
    also before it is moved off a down host, so that every server of it is deleted and
    its GPUs held until released."""
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.ACTIVE)
        if row is None or row.boot != TENANT:
            return
    try:
        seen = {s.id: s for s in lc.cloud.lease_servers(lease_id)}
    except CloudError as exc:
        log.warning("listing the servers of lease %s: %s", lease_id, exc)
        return
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        row = lease_in(session, lease_id, S.ACTIVE)
        if row is None:
            return
        recorded = {s.cloud_id: s for s in row.servers}
        index = max((s.vm_index for s in row.servers), default=-1) + 1
        for cloud_id, state in seen.items():
            server = recorded.get(cloud_id)
            if server is None:
                row.servers.append(m.Server(vm_index=index, host=state.host or "", cloud_id=cloud_id,
                                            status=state.status, fault=state.fault, updated_at=utcnow_naive(now)))
                record_event(session, row, "progress", f"server {cloud_id}"
                             + (f" ({state.name})" if state.name else "") + f" seen: {state.status}"
                             + (f" on {state.host}" if state.host else "")
                             + (f": {state.fault}" if state.fault else ""), now, ACTOR)
                index += 1
            elif (server.status, server.host) != (state.status, state.host or ""):
                server.status, server.host, server.fault = state.status, state.host or "", state.fault
                server.updated_at = utcnow_naive(now)
        for cloud_id, server in recorded.items():
            if cloud_id not in seen and server.status not in GONE:
                server.status, server.updated_at = "DELETED", utcnow_naive(now)
                record_event(session, row, "progress", f"server {cloud_id} is gone", now, ACTOR)

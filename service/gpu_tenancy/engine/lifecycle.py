"""Start leases when their time comes, watch them boot, warn before the end,
end them, and reconcile with what the cloud really has.

Intent before action: every step commits the state it is about to reach
before it calls the cloud, and every cloud object carries the lease id, so a
restarted engine finds each lease part-way and carries it on (the cloud
calls are idempotent per lease and VM).
"""
from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy.cloud.driver import BootRequest, CloudDriver, CloudError, VolumeRequest
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.failures import FailureClass, classify_fault, cloud_said, internal_error, rule
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import (early_ends, gpu_activity, held, host_failure, housekeeping, lease_flavor, networking,
                                notifications, park, planner_settings, readiness, releasing, resume, retry,
                                start_by_margins, webhooks)
from gpu_tenancy.engine.crashpoints import crash_point
from gpu_tenancy.engine.events import StillSo, entered_at, lease_in, record_event, record_transition
from gpu_tenancy.engine.leases import end_allocations_at, finished_or_unknown
from gpu_tenancy.timeutil import rfc3339

log = logging.getLogger(__name__)
S = LeaseState
ACTOR = "engine"


class Lifecycle:
    def __init__(self, sessions: sessionmaker[Session], cloud: CloudDriver, clock, config: Config,
                 settings: PlannerSettings | None = None):
        self.sessions, self.cloud, self.clock, self.config = sessions, cloud, clock, config
        # the app's, when it runs the engine (app.py); else read from the config here
        self.planner_settings = settings or planner_settings.from_config(config)
        self._hosts_refreshed_at: int | None = None
        self._tasks: dict[str, str] = {}   # server id -> the cloud's last task seen while BUILD
        self._awaiting_release: dict[str, dict] = {}   # lease id -> hosts it waits on (told once)
        # lease id -> when its VMs were first all seen ACTIVE (a restart counts the address's grace again)
        self._all_active_since: dict[str, int] = {}
        self._housekept_at: int | None = None
        self._margins_at: int | None = None
        # lease id -> (refusals, next try): leftovers the cloud refused to remove (engine/lease_flavor.py)
        self.leftover_tries: dict[str, tuple[int, int]] = {}
        # leases whose re-placement the cloud has not yet followed (lease_flavor.follow_placement);
        # None until the first pass has looked for them (a restart forgets the set)
        self.placements_to_follow: set[str] | None = None

    # --- one pass -------------------------------------------------------------------------
    def tick(self) -> bool:
        """One pass; returns whether a lease is part-way through starting or ending, so
        the runner looks again sooner than its usual tick."""
        now = self.clock.now()
        if self._hosts_refreshed_at is None or now - self._hosts_refreshed_at >= self.config.host_refresh_seconds:
            self.refresh_hosts()
            self.reconcile()
        host_failure.handle_down_hosts(self)
        # Ends first: GPUs of a lease that is over come back before the plan hands them on.
        early_ends.end_due(self)
        gpu_activity.apply_rules(self)   # idle leases warned, ended or parked, by the operator's rules
        park.tick(self)                  # parked before the replan: their GPUs go to the queue now
        resume.tick(self)                # then parked leases whose slot came resumed, resuming ones carried on
        due = self.clock.now()
        for lease_id in self.ids(S.ACTIVE, end_by=due):
            self.begin_end(lease_id, "its time is up", due)
        for lease_id in self.ids(S.ENDING):
            self.finish_end(lease_id)
        lease_flavor.remove_unstarted(self)
        lease_flavor.follow_pending(self)
        releasing.confirm(self)
        if self._margins_at is None or now - self._margins_at >= start_by_margins.EVERY:
            with session_scope(self.sessions) as session:   # before the plan, which tells them
                start_by_margins.refresh(session, now)
            self._margins_at = now
        with session_scope(self.sessions) as session:
            # the plan, then reclaim and preemption, at the time read under the ledger lock
            plan = early_ends.replan(session, self.clock, self.config, self.planner_settings, ACTOR)
        for lease_id in self.ids(S.SCHEDULED, start_by=plan.now):
            self.start(lease_id)
        for lease_id in self.ids(S.PROVISIONING):
            self.advance(lease_id)
        lease_flavor.record_tenant_servers(self)
        self.warn_due()
        if self._housekept_at is None or now - self._housekept_at >= housekeeping.EVERY:
            housekeeping.run(self.sessions, now, self.config)
            self._housekept_at = now
        return self.in_flight()

    def in_flight(self) -> bool:
        return bool(self.ids(S.PROVISIONING) or self.ids(S.ENDING) or releasing.pending(self)
                    or park.in_flight(self) or resume.in_flight(self))

    def watch(self) -> bool:
        """The light pass between ticks: carry booting and ending leases on, no replan.
        Returns whether a lease finished ending (its GPUs are free: time to replan)."""
        ending = self.ids(S.ENDING)
        for lease_id in ending:
            self.finish_end(lease_id)
        released = releasing.confirm(self)
        for lease_id in self.ids(S.PROVISIONING):
            self.advance(lease_id)
        return released or bool(set(ending) - set(self.ids(S.ENDING)))

    def ids(self, status: LeaseState, start_by: int | None = None, end_by: int | None = None) -> list[str]:
        """The leases in `status` (starting or ending by the times given), by start."""
        with session_scope(self.sessions) as session:
            q = select(m.Lease.id).where(m.Lease.status == status.value)
            if start_by is not None:
                q = q.where(m.Lease.start_at <= utcnow_naive(start_by))
            if end_by is not None:
                q = q.where(m.Lease.end_at <= utcnow_naive(end_by))
            return list(session.scalars(q.order_by(m.Lease.start_at, m.Lease.id)))

    # --- hosts ------------------------------------------------------------------------------
    def refresh_hosts(self) -> None:
        now = self.clock.now()
        try:
            reported = {h.name: h for h in self.cloud.capacity()}
        except CloudError as exc:
            log.warning("capacity refresh failed: %s", exc)
            return
        with session_scope(self.sessions) as session:
            known = {h.name: h for h in session.scalars(select(m.Host))}
            for name, info in reported.items():
                row = known.get(name) or m.Host(name=name, drained=False)
                row.gpu_model, row.gpus, row.enabled, row.up = info.gpu_model, info.gpus, info.enabled, info.up
                row.aggregate, row.updated_at = info.aggregate, utcnow_naive(now)
                session.add(row)
            for name, row in known.items():
                if name not in reported and row.up:
                    row.up, row.updated_at = False, utcnow_naive(now)  # gone from the inventory
            held.set_nominal(session, now, self.cloud.nominal_release_seconds())
        self._hosts_refreshed_at = now

    # --- start ------------------------------------------------------------------------------
    def start(self, lease_id: str) -> None:
        now = self.clock.now()
        with session_scope(self.sessions) as session:
            row = lease_in(session, lease_id, S.SCHEDULED)
            # its start read again under the lock: a drain since the list was read may have moved it later
            if row is None or (row.start_at is not None and to_epoch(row.start_at) > now):
                return
            # GPUs not yet released by the lease before it (a delete slower than planned): booting
            # now would be refused the host. It waits; the engine ticks again on the release.
            blocked = held.unreleased_on(session, row, now, self.planner_settings.release_floor)
            if blocked:
                if self._awaiting_release.get(lease_id) != blocked:
                    self._awaiting_release[lease_id] = blocked
                    record_event(session, row, "progress", "waiting for the GPUs on " + "; ".join(
                        f"{host} (held by lease {', '.join(ids)})" for host, ids in blocked.items())
                        + " to be released by the cloud; it starts once they are", now, ACTOR)
                return
            self._awaiting_release.pop(lease_id, None)
            if row.boot != lease_flavor.TENANT:   # a tenant lease's servers are the tenant's to boot
                for alloc in row.allocations:
                    session.add(m.Server(lease_id=row.id, vm_index=alloc.vm_index, host=alloc.host,
                                         status="REQUESTED", updated_at=utcnow_naive(now)))
            record_transition(session, row, S.PROVISIONING, now, ACTOR,
                              f"starting {row.instances} VM(s) of {row.shape}" if row.boot != lease_flavor.TENANT
                              else f"making its flavor for {row.instances} VM(s) of {row.shape}, "
                                   "for the tenant to boot")
        crash_point("intent_written")
        self.advance(lease_id)

    def advance(self, lease_id: str) -> None:
        """Carry a provisioning lease one step on: its flavor (engine/lease_flavor.py), image,
        volume, boots, then watch; a tenant lease is active once its flavor is."""
        try:
            self._advance(lease_id)
        except CloudError as exc:
            self.fail(lease_id, exc.failure_class, exc.message, exc.cloud_message)
        except Exception as exc:  # a bug of ours: classify it, keep the engine running
            log.exception("provisioning lease %s", lease_id)
            self.fail(lease_id, FailureClass.INTERNAL, internal_error(exc), None)

    def _advance(self, lease_id: str) -> None:
        with session_scope(self.sessions) as session:
            row = lease_in(session, lease_id, S.PROVISIONING)
            if row is None:
                return
            image = session.get(m.Image, row.image) if row.image else None
            project, volume_id, size = row.project_id, row.volume_id, row.volume_size_gb
            tenant, instances, end = row.boot == lease_flavor.TENANT, row.instances, to_epoch(row.end_at)
            pending = [(s.vm_index, s.host, readiness.user_data(row, s.vm_index, self.config.readiness_url))
                       for s in row.servers if s.cloud_id is None]
            extra = dict(key_name=row.key_name, user_id=row.user_id)
            extra.update(networking.boot_fields(row))
            name = row.name
            assert row.start_at is not None   # committed when it was scheduled
            # the boot's time counts from when it began, not from the planned start: a start held
            # back by GPUs still being released, or by the engine being down, is not a slow boot
            started = entered_at(session, lease_id, S.PROVISIONING, to_epoch(row.start_at))
        if tenant:
            if lease_flavor.prepare(self, lease_id):
                lease_flavor.activate(self, lease_id, f"its flavor is ready for {instances} VM(s) the tenant "
                                      f"boots; ends at {rfc3339(end)}")
            return
        if pending:   # once every VM is asked for, each pass only watches (no flavor lookup per poll)
            flavor_id = lease_flavor.prepare(self, lease_id)
            if flavor_id is None:
                return
            self.cloud.check_image(image.cloud_ref if image else "")
            assert image is not None   # the cloud refuses no image (an image failure)
            networking.before_boot(self, lease_id, project, extra, image.cloud_ref)
            if volume_id or size:
                volume_id = self.cloud.ensure_volume(project, lease_id, VolumeRequest(size, volume_id))
                crash_point("volume_made")
                self._note(lease_id, "progress", f"data volume {volume_id} ready", volume_id=volume_id)
            for vm_index, host, user_data in pending:
                server_id = self.cloud.boot(BootRequest(project, lease_id, vm_index, host, flavor_id,
                                                        image.cloud_ref, None, name=f"{name}-{vm_index}",
                                                        user_data=user_data, **extra))
                crash_point("boot_requested")
                self.set_server(lease_id, vm_index, cloud_id=server_id, status="BUILD")
                self._note(lease_id, "progress", f"VM {vm_index} requested on {host} (server {server_id})")
        self._watch(lease_id, started)

    def _watch(self, lease_id: str, started: int) -> None:
        now = self.clock.now()
        with session_scope(self.sessions) as session:
            row = session.get_one(m.Lease, lease_id)
            servers = [(s.vm_index, s.cloud_id, s.status) for s in row.servers]
            volume_id = row.volume_id
        states = {}
        for vm_index, cloud_id, old in servers:
            assert cloud_id is not None   # every VM is booted before they are watched
            try:
                state = self.cloud.server_state(cloud_id)
            except CloudError as exc:
                # the read failed, not the VM (a compute API blip): no failed attempt, whose retry
                # would delete VMs that boot on; read again at the next pass, up to the boot's timeout
                if now - started <= self.config.boot_timeout_seconds:
                    log.warning("watching lease %s: %s", lease_id, exc)
                    return
                raise CloudError(FailureClass.BOOT_TIMEOUT, f"the VMs were not seen active within "
                                 f"{self.config.boot_timeout_seconds} s: {exc.message}", exc.cloud_message) from None
            states[vm_index] = state
            if state.status != old:
                self.set_server(lease_id, vm_index, status=state.status, fault=state.fault)
                if state.status == "ACTIVE":
                    self._tasks.pop(cloud_id, None)
                    self._note(lease_id, "progress", f"VM {vm_index} is active on {state.host}")
            if state.status == "BUILD" and state.task and self._tasks.get(cloud_id) != state.task:
                self._tasks[cloud_id] = state.task
                self._note(lease_id, "progress", f"VM {vm_index}: {state.task.replace('_', ' ')}")
        failed = [s for s in states.values() if s.status in ("ERROR", "DELETED")]
        if failed:
            if failed[0].status == "DELETED" and not failed[0].fault:
                # gone while it booted, with no fault of its own: deleted by a retry the engine
                # stopped in (before it committed the re-placement), or by hand; tried again elsewhere
                raise CloudError(FailureClass.API_ERROR, f"VM {failed[0].id} is gone while it was booting")
            fault = failed[0].fault or f"server {failed[0].id} is {failed[0].status}"
            raise CloudError(classify_fault(fault), f"VM {failed[0].id} failed to boot", fault)
        if all(s.status == "ACTIVE" for s in states.values()):
            crash_point("active_seen")
            waited = now - self._all_active_since.setdefault(lease_id, now)
            try:
                if not self._after_active(lease_id, states, volume_id, waited):
                    return
            except CloudError as exc:
                # the VMs booted: a step after it that failed for the API (a 500, a timeout) is tried
                # again at the next pass, the VMs kept, up to boot_timeout_seconds since they were all
                # active; it was a failed attempt, whose retry deleted the VMs and spent one of the
                # lease's attempts. A refusal the user or operator must fix (volume, network) fails as ever.
                if exc.failure_class is not FailureClass.API_ERROR or waited > self.config.boot_timeout_seconds:
                    raise
                log.warning("lease %s, its VMs active: %s; trying again", lease_id, exc)
                return
            self._all_active_since.pop(lease_id, None)
        elif now - started > self.config.boot_timeout_seconds:
            raise CloudError(FailureClass.BOOT_TIMEOUT,
                             f"the VMs were not active within {self.config.boot_timeout_seconds} s")

    def _after_active(self, lease_id: str, states: dict, volume_id: str | None, waited: int) -> bool:
        """The steps once every VM is ACTIVE: the data volume attached, addresses and floating IPs
        (engine/networking.py), the flavor granted and the lease active; each idempotent, so a pass
        that failed part-way is carried on by the next. False while an address is still to come."""
        if volume_id:
            self.cloud.attach_volume(states[0].id, volume_id)
        if not networking.on_active(self, lease_id, states, waited):
            return False
        with session_scope(self.sessions) as session:
            row = session.get_one(m.Lease, lease_id)
            why = (f"all {len(states)} VM(s) active; ends at {rfc3339(to_epoch(row.end_at))}"
                   + ("; ready once each VM reports its GPUs usable" if row.readiness_probe else ""))
        lease_flavor.activate(self, lease_id, why)
        return True

    # --- failure ----------------------------------------------------------------------------
    def fail(self, lease_id: str, failure: FailureClass, message: str, cloud_message: str | None) -> None:
        """Retry a host-level fault elsewhere (engine/retry.py); otherwise record the
        failure, then remove what was made (the volume stays)."""
        self._all_active_since.pop(lease_id, None)   # an attempt that failed once all ACTIVE: its next counts anew
        if retry.retry_elsewhere(self, lease_id, failure, message + cloud_said(cloud_message)):
            return
        now = self.clock.now()
        with session_scope(self.sessions) as session:
            row = lease_in(session, lease_id, S.PROVISIONING)
            if row is None:
                return
            row.failure_class = failure.value
            row.failure_message = message + cloud_said(cloud_message)
            retry.record_failure(session, row, failure, row.failure_message, now, "failed", retry.lease_hosts(row))
            record_event(session, row, "failure", f"{failure.value}: {row.failure_message}; "
                         f"{rule(failure).user_message}", now, ACTOR)
            end_allocations_at(session, row, now)
            record_transition(session, row, S.ENDING, now, ACTOR, f"failed ({failure.value}); removing its VMs")
        self.finish_end(lease_id)

    # --- end --------------------------------------------------------------------------------
    def warn_due(self) -> None:
        now = self.clock.now()
        lead = self.config.warn_before_end_seconds
        with session_scope(self.sessions) as session:
            due = list(session.scalars(select(m.Lease.id).where(
                m.Lease.status == S.ACTIVE.value, m.Lease.warned_at.is_(None),
                m.Lease.end_at <= utcnow_naive(now + lead))))
        for lease_id in due:
            # each under its lock, read again (engine/events.py lease_in), in a transaction of its
            # own: an extension committed meanwhile is not written over, and no request's replan,
            # which takes the ledger lock and then leases', waits on a circle with this
            with session_scope(self.sessions) as session:
                row = lease_in(session, lease_id, S.ACTIVE)
                if row is None or row.warned_at is not None or to_epoch(row.end_at) > now + lead:
                    continue
                row.warned_at = utcnow_naive(now)
                record_event(session, row, "warning",
                             f"the lease ends at {rfc3339(to_epoch(row.end_at))}; {webhooks.what_the_end_deletes(row)}. "
                             "Extend it with PATCH if the GPUs are free", now, ACTOR)
                webhooks.enqueue(session, row, webhooks.ENDING_SOON, webhooks.ending_soon_payload(row, now), now)
                notifications.enqueue(session, row, notifications.BEFORE_END_LEASE, now)

    def begin_end(self, lease_id: str, why: str, due: int | None = None, still: StillSo | None = None) -> None:
        """`due`: it ends because its end is at or before then, which is read again here (an
        extension committed since the list was read moves it). `still`: the reason it ends, asked
        again under the lease's lock (an idle lease's busy report committed since)."""
        now = self.clock.now()
        with session_scope(self.sessions) as session:
            row = lease_in(session, lease_id, S.ACTIVE)
            if row is None or (due is not None and row.end_at is not None and to_epoch(row.end_at) > due):
                return
            if still is not None and not still(session, row, now):
                return
            end_allocations_at(session, row, now)
            record_transition(session, row, S.ENDING, now, ACTOR, why)
        crash_point("end_intent_written")
        self.finish_end(lease_id)

    def finish_end(self, lease_id: str) -> None:
        """Revoke the flavor, delete the servers, the service's and the tenant's (volumes are
        detached and kept), then the inventory, flavor and class (engine/lease_flavor.py), then
        the lease's floating IPs (engine/networking.py); ended once the GPUs are released and
        all of that is gone."""
        if not lease_flavor.teardown(self, lease_id) or not networking.release(self, lease_id):
            return  # the next tick looks again
        now = self.clock.now()
        with session_scope(self.sessions) as session:
            row = session.get_one(m.Lease, lease_id)
            if row.status == S.ENDING.value:
                if any(s.cloud_id for s in row.servers):   # VMs were deleted: how long it took
                    held.record_release(session, now, now - entered_at(session, lease_id, S.ENDING, now))
                target = S.FAILED if row.failure_class else early_ends.final_state(row)
                record_transition(session, row, target, now, ACTOR,
                                  "VMs deleted, GPUs released" + ("; the data volume is kept" if row.volume_id else ""))

    # --- reconcile --------------------------------------------------------------------------
    def reconcile(self) -> None:
        """Delete servers of leases over or unknown (left by a crash: tagged with the lease and
        booted with its flavor, in its project), and what
        such a lease left of its flavor (engine/lease_flavor.py) and its floating IPs
        (engine/networking.py); remove every per-project flavor of the first wave (a lease
        now boots with its own)."""
        networking.reconcile(self)
        try:
            objects = self.cloud.list_tagged()
        except CloudError as exc:
            log.warning("reconcile: listing cloud objects failed: %s", exc)
            return
        for flavor in (o for o in objects if o.kind == "flavor" and not o.lease_id and o.attrs.get("shape")):
            if flavor.project_id is None:   # not one of ours: each was made for a project
                continue
            log.info("reconcile: removing per-project flavor %s (%s)", flavor.id, flavor.attrs.get("name"))
            try:
                self.cloud.retire_flavor(flavor.project_id, flavor.attrs["shape"])
            except CloudError as exc:
                log.warning("reconcile: removing flavor %s failed: %s", flavor.id, exc)
        lease_flavor.reconcile(self)
        # a server's lease tag is its project's to write, on any server of its own: a server is the
        # lease's only if it was booted with the lease's flavor (flavor_lease, which the cloud says)
        # and is in the lease's project. Else a tenant's own server, tagged with a lease that is
        # over or none at all, was deleted (a VM of a lease still running among them), and
        # thousands of such tags made as many deletes in the tick, before the ends and the plan.
        servers = [o for o in objects if o.kind == "server" and o.lease_id
                   and o.attrs.get("flavor_lease") == o.lease_id]
        with session_scope(self.sessions) as session:
            over = finished_or_unknown(session, {o.lease_id for o in servers})
        for obj in servers:
            if obj.lease_id in over and over[obj.lease_id] in (None, obj.project_id):
                log.info("reconcile: deleting server %s of finished lease %s", obj.id, obj.lease_id)
                try:   # one the cloud will not delete stops neither the others nor the tick's ends and plan
                    self.cloud.delete_server(obj.id)
                except CloudError as exc:
                    log.warning("reconcile: deleting server %s failed: %s", obj.id, exc)

    # --- small writes -----------------------------------------------------------------------
    def _note(self, lease_id: str, kind: str, message: str, **columns) -> None:
        with session_scope(self.sessions) as session:
            row = session.get_one(m.Lease, lease_id)
            for key, value in columns.items():
                setattr(row, key, value)
            record_event(session, row, kind, message, self.clock.now(), ACTOR)

    def set_server(self, lease_id: str, vm_index: int, **columns) -> None:
        """Write what the cloud says of one VM of a lease (status, host, ...) to its server row."""
        with session_scope(self.sessions) as session:
            server = session.scalars(select(m.Server).where(m.Server.lease_id == lease_id,
                                                            m.Server.vm_index == vm_index)).one()
            for key, value in columns.items():
                setattr(server, key, value)
            server.updated_at = utcnow_naive(self.clock.now())


"""What a tenant can do to a lease: ask, preview, change its end, cancel.
The API calls these; each runs in the caller's transaction (a new lease is
planned in a second one: see create)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import key_lock, ledger_lock, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.model import LeaseRequest
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.states import FINAL, HOLDING, LeaseState
from gpu_tenancy.domain.budget import Span
from gpu_tenancy.domain.extension import window_refusal
from gpu_tenancy.domain.lease_ask import Boot, EndChange, LeaseAsk, VolumeAsk
from gpu_tenancy.engine import (ask_facts, budgets, catalog, early_ends, lease_insert, ledger, notifications,
                                plan_change, plan_insert, plan_remove)
from gpu_tenancy.engine.decision_hook import DecisionHook
from gpu_tenancy.engine.events import record_event, record_transition
from gpu_tenancy.engine.limits import Limits
from gpu_tenancy.engine.readiness import new_token as new_readiness_token
from gpu_tenancy.errors import BadRequest, Conflict, Forbidden
from gpu_tenancy.timeutil import rfc3339, spoken_duration

S = LeaseState
START_SLACK = 300  # a start this far in the past still counts as "now" (clock skew)


@dataclass
class Caller:
    user_id: str
    project_id: str
    is_admin: bool = False


def build_request(session: Session, now: int, limits: Limits, caller: Caller, ask: LeaseAsk,
                  lease_id: str) -> tuple[LeaseRequest, dict]:
    """Check a lease request against the service's limits, the catalog, the quota and the
    cloud's size; returns the planner's view of it and the columns to store."""
    request, columns, _ = checked_request(session, now, limits, caller, ask, lease_id)
    return request, columns


def checked_request(session: Session, now: int, limits: Limits, caller: Caller, ask: LeaseAsk,
                    lease_id: str) -> tuple[LeaseRequest, dict, ask_facts.AskFacts]:
    """build_request's, with what it read (whether the name is taken, which create checks)."""
    name = ask.name or f"lease-{lease_id[:8]}"
    # one statement, checked in order below (the shapes kept for the offers)
    facts = ask_facts.read(session, caller.project_id, caller.user_id, ask.shape, name,
                           limits.waiting_per_project, limits.waiting_per_user)
    offered = catalog.keep_offered(session, facts.shapes)
    shape = next((s for s in offered if s.name == ask.shape), None)
    if shape is None:
        names = ", ".join(s.name for s in offered)
        raise BadRequest(f"unknown shape '{ask.shape}'; the shapes offered are: {names or 'none'}",
                         codes.UNKNOWN_SHAPE)
    if ask.boot is Boot.TENANT:
        check_tenant_boot(ask)
    image = resolve_image(session, ask.image, facts.default_image) if ask.boot is Boot.SERVICE else None
    duration = ask.duration
    start = resolve_start(ask.start, now)
    limits.check_ahead("start", start, now)   # the service's bounds come before the quota's
    latest = ask.latest_start
    if latest is not None:
        if latest < start:
            raise BadRequest(f"latest_start {rfc3339(latest)} is before start {rfc3339(start)}",
                             codes.BAD_LATEST_START)
        limits.check_ahead("latest_start", latest, now)
    instances = ask.instances
    limits.check_waiting(caller.project_id, caller.user_id, facts.waiting_project, facts.waiting_user)
    priority, class_name, preemptible = resolve_priority(session, caller, ask)
    # The cloud's size before the quota: "the cloud has 32" says more than "may hold 16 (+8)".
    # "Ever" counts hosts that are down or drained too: they come back, and the lease waits for them.
    if not planner.can_ever_fit_on(facts.host_gpus, shape.gpus, instances):
        total = sum(facts.host_gpus)
        largest = max(facts.host_gpus, default=0)
        raise BadRequest(
            f"{instances} x {shape.name} needs {instances * shape.gpus} {shape.gpu_model} GPUs, "
            f"{shape.gpus} on one host; the cloud has {total}, at most {largest} on one host",
            codes.NEVER_FITS)
    check_quota_of(limits, caller.project_id, facts.quota, shape, instances, duration, any_size=preemptible)
    volume = ask.volume or VolumeAsk()
    if volume.id:
        check_volume_free(session, caller.project_id, volume.id)
    request = LeaseRequest(lease_id=lease_id, project_id=caller.project_id, gpu_model=shape.gpu_model,
                           gpus_per_vm=shape.gpus, instances=instances, duration=duration,
                           earliest_start=start, latest_start=latest, created_at=now,
                           priority=priority, name=ask.name or "", preemptible=preemptible)
    if facts.has_budget:
        # two creates, or a create and an extension, do not both pass one budget: checked under the ledger
        # lock (the fit takes it anyway), as an extension's is
        ledger_lock(session)
        budgets.check(session, now, caller.project_id, shape.gpu_model,
                      Span(instances * shape.gpus, start, start + duration))
    columns = dict(name=name, shape=shape.name, image=image,
                   volume_size_gb=volume.size_gb, volume_id=volume.id,
                   key_name=ask.key_name, user_data=ask.user_data,
                   priority_class=class_name, preemptible=preemptible,
                   readiness_probe=ask.readiness_probe, boot=ask.boot.value)
    return request, columns, facts


def check_tenant_boot(ask: LeaseAsk) -> None:
    given = ask.service_boot_fields_given()
    if given:
        raise BadRequest(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to a lease with "
                         '"boot": "tenant": the tenant boots its servers with the lease\'s flavor and its own '
                         "image, volume, key pair, user data and network; ask without "
                         + ", ".join(given), codes.NOT_FOR_TENANT_BOOT)


def resolve_priority(session: Session, caller: Caller, ask: LeaseAsk) -> tuple[int, str | None, bool]:
    """(priority, class name, preemptible) from the ask's priority_class, or its bare
    priority (admins only above 0)."""
    name = ask.priority_class
    if name is None:
        priority = ask.priority or 0
        if priority > 0 and not caller.is_admin:
            raise Forbidden("only an admin may give a lease a priority above 0", codes.PRIORITY)
        return priority, None, False
    if ask.priority is not None:
        raise BadRequest("give priority_class or priority, not both", codes.BAD_PRIORITY)
    row = session.get(m.PriorityClass, name)
    if row is None:
        names = ", ".join(session.scalars(select(m.PriorityClass.name).order_by(m.PriorityClass.priority.desc())))
        raise BadRequest(f"unknown priority class '{name}'; the classes are: {names or 'none'}",
                         codes.UNKNOWN_PRIORITY_CLASS)
    if row.projects is not None and caller.project_id not in row.projects and not caller.is_admin:
        raise Forbidden(f"project {caller.project_id} may not use priority class {name}; it is for "   # (not named)
                        f"{'other projects' if row.projects else 'no project'}", codes.PRIORITY_CLASS_NOT_ALLOWED)
    return row.priority, row.name, row.preemptible


def resolve_image(session: Session, name: str | None, default: str | None) -> str:
    """The image asked (None: `default`, catalog.default_image's), refused unless offered."""
    if default is None:
        raise Conflict("the standard image catalog is empty; an admin must add an image first",
                       codes.NO_IMAGES)
    if name is None:
        return default
    offered = [i.name for i in catalog.entries(session, m.Image)]
    if name not in offered:
        raise BadRequest(f"unknown image '{name}'; the standard images are: " + ", ".join(offered),
                         codes.UNKNOWN_IMAGE)
    return name


def resolve_start(start: int | None, now: int) -> int:
    """The asked start (None: now), refused when past."""
    if start is None:
        return now
    if start < now - START_SLACK:
        raise BadRequest(f"start {rfc3339(start)} is in the past (now is {rfc3339(now)}); "
                         "give a later time or \"now\"", codes.START_IN_PAST)
    return max(start, now)


def check_quota(session: Session, limits: Limits, project_id: str, shape: m.Shape | catalog.Offered,
                instances: int, duration: int, any_size: bool = False) -> None:
    """`any_size`: a preemptible lease, which the quota's GPU count does not limit."""
    check_quota_of(limits, project_id, session.get(m.Quota, (project_id, shape.gpu_model)), shape, instances,
                   duration, any_size)


def check_quota_of(limits: Limits, project_id: str, quota: m.Quota | ask_facts.QuotaLimits | None,
                   shape: m.Shape | catalog.Offered,
                   instances: int, duration: int, any_size: bool = False) -> None:
    """check_quota's, with the project's quota of the shape's GPU model read (None: none)."""
    limits.check_duration(duration)
    wanted = instances * shape.gpus
    if quota is None or quota.gpus + quota.borrow_gpus == 0:
        raise Forbidden(f"project {project_id} has no quota for {shape.gpu_model} GPUs; "
                        "ask an admin to set one", codes.NO_QUOTA)
    if wanted > quota.gpus + quota.borrow_gpus and not any_size:
        raise Forbidden(f"the lease needs {wanted} {shape.gpu_model} GPUs at once; project {project_id} "
                        f"may hold {quota.gpus} (+{quota.borrow_gpus} borrowed)", codes.OVER_QUOTA)
    if quota.max_duration is not None and duration > quota.max_duration:
        raise BadRequest(f"duration {spoken_duration(duration)} is over project {project_id}'s maximum of "
                         f"{spoken_duration(quota.max_duration)} for {shape.gpu_model} leases",
                         codes.OVER_MAX_DURATION)


def check_name_free(session: Session, project_id: str, name: str) -> None:
    """A name finds one lease: refuse a name another unfinished lease of the project has (the CLI
    and dashboard take names where ids are long). Two requests that write one name take turns
    (name_lock); one that passed this all the same is told apart by the database's unique index
    (db/models.py): its write is refused, and name_written says why."""
    other = session.execute(select(m.Lease.id, m.Lease.status).where(
        m.Lease.project_id == project_id, m.Lease.name == name,
        m.Lease.status.not_in([s.value for s in FINAL])).limit(1)).first()
    check_name_untaken(project_id, name, None if other is None else (other.id, other.status))


def check_name_untaken(project_id: str, name: str, other: tuple[str, str] | None) -> None:
    """check_name_free's, with the other lease of that name read (id, status; None: none)."""
    if other is not None:
        raise name_taken(project_id, name, f"{other[0]}, {other[1]}")


def name_taken(project_id: str, name: str, which: str) -> Conflict:
    return Conflict(f"project {project_id} already has a lease named '{name}' ({which}); "
                    "choose another name, or cancel that one first", codes.LEASE_NAME_TAKEN)


# how each database names that unique index in its refusal: PostgreSQL by its name, SQLite by its columns
NAME_INDEX_REFUSALS = (m.NAME_INDEX, "leases.project_id, leases.name")


@contextmanager
def name_written(project_id: str, name: str) -> Iterator[None]:
    """A write of a lease's name (its INSERT, a rename's flush), refused by the unique index
    because another request made or renamed a lease to that name since this one's check: the
    409 the check gives, rather than a 500. The transaction is rolled back as the error leaves
    it (on PostgreSQL it cannot go on), so nothing of this request is kept."""
    try:
        yield
    except IntegrityError as e:
        if not any(refusal in str(e.orig) for refusal in NAME_INDEX_REFUSALS):
            raise
        raise name_taken(project_id, name, "made by another request at the same time") from None


def rename(session: Session, now: int, row: m.Lease, name: str, actor: str) -> None:
    """A lease's new name (the Blazar API's `lease set --name`), free among the project's
    unfinished leases; an event tells the old one."""
    lock_for_change(session, row)
    if name == row.name:
        return
    check_name_free(session, row.project_id, name)
    record_event(session, row, "renamed", f"renamed from '{row.name}' to '{name}'", now, actor)
    row.name, row.updated_at = name, utcnow_naive(now)
    with name_written(row.project_id, name):
        session.flush()


def finished_or_unknown(session: Session, lease_ids) -> dict[str, str | None]:
    """Of these lease ids, those whose lease is over or that no lease has (reconcile removes what
    they left in the cloud), each with its project (None when unknown)."""
    ids = set(lease_ids)
    found = {i: (status, project) for i, status, project in session.execute(
        select(m.Lease.id, m.Lease.status, m.Lease.project_id).where(m.Lease.id.in_(ids)))} if ids else {}
    final = {s.value for s in FINAL}
    return {i: found[i][1] if i in found else None for i in ids if i not in found or found[i][0] in final}


def check_volume_free(session: Session, project_id: str, volume_id: str) -> None:
    """A volume is the data volume of one unfinished lease. Two creates asking for it at once take
    turns from here to their commit: the second's check reads the first's lease."""
    volume_lock(session, project_id, volume_id)
    busy = session.scalar(select(m.Lease.id).where(
        m.Lease.project_id == project_id, m.Lease.volume_id == volume_id,
        m.Lease.status.not_in([s.value for s in FINAL])).limit(1))
    if busy:
        raise Conflict(f"volume {volume_id} is already the data volume of lease {busy}; "
                       "a volume attaches to one lease at a time", codes.VOLUME_IN_USE)


def create(session: Session, now: int, limits: Limits, caller: Caller, ask: LeaseAsk,
           hook: DecisionHook = DecisionHook(), lease_id: str | None = None) -> m.Lease:
    """Add the lease, queued. It is planned once this transaction has committed
    (ledger.plan_new, or else the engine's next replan), so that one replan can
    plan the leases of many requests. `lease_id`: the id the decision service was told."""
    lease_id = lease_id or ledger.new_lease_id()
    create_lock(session, caller.project_id, ask.name)   # first of all: before the volume's and the ledger's
    request, columns, facts = checked_request(session, now, limits, caller, ask, lease_id)
    # for the fit of the lease made here (plan_insert.fit_made pops them): a dry run, which
    # fits nothing, leaves none behind in its session
    session.info[plan_insert.LEDGER_COUNTS] = facts.ledger
    session.info[plan_insert.START_BY_MARGIN] = facts.start_by_margin
    check_name_untaken(caller.project_id, columns["name"], facts.name_taken)
    hook.ask("accept", {"id": lease_id, "project_id": caller.project_id, "user_id": caller.user_id,
                        "gpu_model": request.gpu_model, "gpus_per_instance": request.gpus_per_vm,
                        "instances": request.instances, "duration": request.duration,
                        "start": rfc3339(request.earliest_start), "priority": request.priority,
                        **{k: columns[k] for k in ("name", "shape", "priority_class", "preemptible")}},
             caller.user_id)
    stamp = utcnow_naive(now)
    columns["readiness_token"] = new_readiness_token() if columns["readiness_probe"] else None
    row = m.Lease(id=lease_id, project_id=caller.project_id, user_id=caller.user_id, status=None,
                  gpu_model=request.gpu_model, gpus_per_vm=request.gpus_per_vm, instances=request.instances,
                  duration=request.duration, earliest_start=utcnow_naive(request.earliest_start),
                  asked_start=utcnow_naive(request.earliest_start),
                  latest_start=utcnow_naive(request.latest_start) if request.latest_start else None,
                  priority=request.priority, created_at=stamp, updated_at=stamp, queue_reasons=[],
                  allocations=[], servers=[], failures=[],   # known empty: rendering loads nothing
                  **columns)
    with name_written(caller.project_id, row.name):
        first, _ = lease_insert.insert_new(session, row, [(S.REQUESTED, caller.user_id, "asked for by the user"),
                                                           (S.QUEUED, "planner", "waiting for its turn")], now)
    # its place in the order of asking: the id of its first event, from the database's own
    # monotonic sequence (created_at has whole seconds, the lease id is random); written with
    # the lease's next change (its queue place), not a statement of its own
    row.arrival = first
    return row


HELD = "leases_held"   # session.info: the ids of the leases lock_for_change has locked in its transaction


def lock_for_change(session: Session, row: m.Lease) -> None:
    """Before a request changes a lease: the ledger lock, then the lease's row locked and read
    again, so that what the change checks (its state, its end, the budget) holds until it
    commits, whatever the engine or another request does meanwhile. Always in that order, which
    the engine's steps keep too (engine/events.py lease_in), so that no two transactions wait
    for each other; taken once per transaction. (A create's lock with its name's, then a data
    volume's, all key_lock, come before the ledger's: a create takes them as it begins and at its
    volume's check, an offer taken before the ledger's, a rename the name's before this.)"""
    held = session.info.setdefault(HELD, set())
    if row.id in held:
        return
    ledger_lock(session)
    session.refresh(row, with_for_update=True)
    held.add(row.id)


CREATING = "creating_in"   # session.info: the project create_lock has locked in its transaction


def create_lock(session: Session, project_id: str, name: str | None) -> None:
    """A new lease of the project (and its name, if it has one: name_lock), made by one request at
    a time till it commits, taken once per transaction, before any other lock. The waiting limits
    count the project's leases before the lease is written: two creates counting at once each saw
    a place left, and both were made. One statement for both locks, the project's first (a
    rename takes the name's alone)."""
    if session.info.get(CREATING) == project_id:
        return
    key_lock(session, f"create {project_id}", *([name_key(project_id, name)] if name else []))
    session.info[CREATING] = project_id


def name_lock(session: Session, project_id: str, name: str) -> None:
    """A lease name of the project, written (a create's INSERT, a rename) by one request at a time
    till it commits; taken before the ledger lock. A create that fits its lease into the plan
    writes the name before it takes the ledger lock (engine/plan_insert.py), and a write of the
    same name under the ledger lock waits on the unique index for that create to end: the two
    waited for each other, and PostgreSQL ended one as a deadlock."""
    key_lock(session, name_key(project_id, name))


def name_key(project_id: str, name: str) -> str:
    return f"name {project_id} {name}"


def volume_lock(session: Session, project_id: str, volume_id: str) -> None:
    """The project's data volume, checked and given to a lease by one request at a time till it commits."""
    key_lock(session, f"volume {project_id} {volume_id}")


def cancel(session: Session, now: int, config: Config, settings: PlannerSettings, row: m.Lease, actor: str,
           hook: DecisionHook = DecisionHook(), fits: plan_insert.InsertCache | None = None) -> bool:
    """Cancel a waiting lease, or end a running one now. The data volume stays. `fits`: the
    process's copy of the plan (as creates fit into it); with it, a waiting lease of a long queue
    is taken out of the plan (plan_remove.take_out) rather than every lease planned again under
    the ledger lock: the engine's next replan (the API wakes it) moves the others earlier.
    Returns whether it was only taken out (no replan here): that replan may then wait
    (engine/runner.py: wake, can_wait)."""
    lock_for_change(session, row)
    status = S(row.status)
    if status in FINAL or status is S.ENDING:
        raise Conflict(f"lease {row.id} is already {row.status}", codes.LEASE_FINISHED)
    hook.ask("end", hook_view(row), actor)
    taken_out = plan_remove.take_out(session, settings, row, fits)
    if status in (S.REQUESTED, S.QUEUED, S.SCHEDULED):
        session.execute(delete(m.Allocation).where(m.Allocation.lease_id == row.id))
        session.expire(row, ["allocations"])  # the bulk delete leaves the loaded list stale
        record_transition(session, row, S.CANCELLED, now, actor, "cancelled by the user")
        ledger.clear_queue_info(row)
    else:
        end_allocations_at(session, row, now)
        record_transition(session, row, S.ENDING, now, actor, "ended early by the user")
    notifications.enqueue(session, row, notifications.DELETE, now)
    session.flush()
    if not taken_out:
        early_ends.replan_at(session, now, config, settings)
    return taken_out


def done(session: Session, now: int, config: Config, settings: PlannerSettings, row: m.Lease, actor: str,
         why: str, hook: DecisionHook = DecisionHook()) -> m.Lease:
    """The work in a running lease is done: end it now and give its GPUs back (the data
    volume stays). Unlike a cancel, a lease that is not running is refused: a job script
    that says it is done has run."""
    lock_for_change(session, row)
    if S(row.status) not in (S.PROVISIONING, S.ACTIVE):
        raise Conflict(f"lease {row.id} is {row.status}; only a running lease can be done (DELETE cancels "
                       "a waiting one)", codes.LEASE_NOT_RUNNING)
    hook.ask("end", hook_view(row), actor)
    end_allocations_at(session, row, now)
    record_transition(session, row, S.ENDING, now, actor, why)
    session.flush()
    early_ends.replan_at(session, now, config, settings)
    return row


def end_allocations_at(session: Session, row: m.Lease, now: int) -> None:
    """Shorten the lease's planned end to now (usage counts what was held). No allocation that
    has begun is removed: one that began this very second has a VM booting on its GPUs, and the
    lease holds them, whatever its end says, until the cloud has released them (the lease is
    ended). One that has not begun (a parked lease's held slot) was never used: it goes."""
    stamp = utcnow_naive(now)
    for alloc in list(row.allocations):
        if alloc.start_at > stamp:
            row.allocations.remove(alloc)
            session.delete(alloc)
        elif alloc.end_at > stamp:
            alloc.end_at = max(stamp, alloc.start_at + timedelta(seconds=1))   # a window is never empty
    row.end_at = min(row.end_at, stamp) if row.end_at else stamp


def hook_view(row: m.Lease, **changes) -> dict:
    """What the decision service is told of a lease."""
    view = {"id": row.id, "name": row.name, "project_id": row.project_id, "user_id": row.user_id,
            "status": row.status, "shape": row.shape, "gpu_model": row.gpu_model,
            "gpus_per_instance": row.gpus_per_vm, "instances": row.instances, "duration": row.duration,
            "start": rfc3339(to_epoch(row.start_at)), "end": rfc3339(to_epoch(row.end_at)),
            "priority": row.priority, "priority_class": row.priority_class, "preemptible": row.preemptible}
    return {**view, **changes}


def change_end(session: Session, now: int, config: Config, settings: PlannerSettings, limits: Limits, row: m.Lease,
               change: EndChange, actor: str, extension_window: int | None = None, hook: DecisionHook = DecisionHook(),
               fits: plan_insert.InsertCache | None = None) -> bool:
    """Extend or shrink. An extension is granted only if it delays nobody planned, within the
    maximum duration and the budget; with `extension_window`, only in the lease's last part.
    `fits`: the process's copy of the plan; with it, a waiting lease of a long queue gets its new
    place in the plan as it stands (plan_change.new_duration) rather than every lease planned
    again under the ledger lock: the engine's next replan (the API wakes it) moves it and the others.
    Returns whether it was so placed (no replan here): that replan may then wait (engine/runner.py: wake)."""
    lock_for_change(session, row)
    status = S(row.status)
    if status not in (S.QUEUED, S.SCHEDULED, S.PROVISIONING, S.ACTIVE):
        raise Conflict(f"lease {row.id} is {row.status}; only a waiting or running lease can change "
                       "its end", codes.LEASE_FINISHED)
    if change.duration is not None:
        duration = change.duration
    else:
        assert change.end is not None   # an EndChange has one or the other
        # a waiting lease's end is read from the start it is shown (the queue's planned one, as the
        # budget's check below reads it), not from its asked start: the answer then shows the end asked
        start = committed_window(row)[0] if status in HOLDING else to_epoch(row.start_at or row.earliest_start)
        duration = change.end - start
        if duration <= 0:
            raise BadRequest(f"end {rfc3339(change.end)} is not after the lease's start {rfc3339(start)}",
                             codes.BAD_END)
    check_not_shortened(row, duration, change.shrink)
    if duration > row.duration:   # a shrink asks for less: no limit lowered since (a quota's, the service's) refuses it
        shape = session.get_one(m.Shape, row.shape)
        check_quota(session, limits, row.project_id, shape, row.instances, duration, any_size=row.preemptible)
    if status is S.QUEUED and duration > row.duration:
        # where the budget counts a waiting lease (budgets.spans): its planned start, never before now
        start = max(to_epoch(row.start_at or row.earliest_start), now)
        budgets.check(session, now, row.project_id, row.gpu_model,
                      Span(row.gpus_per_vm * row.instances, start + row.duration, start + duration))
    elif status is not S.QUEUED:
        check_extension_rules(session, now, row, committed_window(row)[0] + duration, extension_window)
    if status is S.QUEUED:
        if duration > row.duration:
            hook.ask("extend", hook_view(row, duration=duration), actor)
        old_duration, row.duration = row.duration, duration
        placed = plan_change.new_duration(session, now, settings, row, old_duration, fits)
        record_event(session, row, "change", f"duration set to {spoken_duration(duration)}", now, actor)
        notifications.enqueue(session, row, notifications.UPDATE, now)
        session.flush()
        if not placed:
            early_ends.replan_at(session, now, config, settings)
        return placed
    start, old_end = committed_window(row)
    new_end = start + duration
    if new_end <= now:
        raise BadRequest(f"the new end {rfc3339(new_end)} has already passed; to end the lease now, "
                         "DELETE it", codes.END_PASSED)
    if new_end > old_end:
        inputs = ledger.load_inputs(session, now, settings)
        conflicts = planner.extension_conflicts(
            now, inputs.hosts, inputs.holds, inputs.quotas, inputs.waiting, inputs.usage, row.id, new_end, settings)
        if conflicts:
            raise Conflict("the extension is refused: " + "; ".join(conflicts), codes.EXTENSION_REFUSED)
        hook.ask("extend", hook_view(row, duration=duration, end=rfc3339(new_end)), actor)
    for alloc in row.allocations:
        alloc.end_at = utcnow_naive(new_end)
    row.end_at, row.duration = utcnow_naive(new_end), duration
    if row.early_end_from is not None:   # under notice, shrunk: a call-off gives back the end asked now, no later one
        row.early_end_from = min(row.early_end_from, row.end_at)
    if new_end > old_end:
        row.warned_at = None  # warn again before the new end
    verb = "extended" if new_end > old_end else "shortened"
    record_event(session, row, "change", f"{verb} to end at {rfc3339(new_end)}", now, actor)
    notifications.enqueue(session, row, notifications.UPDATE, now)
    session.flush()
    early_ends.replan_at(session, now, config, settings)
    return False


def committed_window(row: m.Lease) -> tuple[int, int]:
    """A holding lease's committed start and end (both set when it is scheduled)."""
    assert row.start_at is not None and row.end_at is not None
    return to_epoch(row.start_at), to_epoch(row.end_at)


def check_not_shortened(row: m.Lease, duration: int, shrink: bool) -> None:
    """An extension never shortens: a mistyped one (--duration P1D on a lease of 30 h) would cut
    a training run. Shortening is its own explicit ask, `"shrink": true`."""
    if duration < row.duration and not shrink:
        raise Conflict(f"this would shorten lease {row.name} by {spoken_duration(row.duration - duration)} "
                       f"(from {spoken_duration(row.duration)} to {spoken_duration(duration)}); to shorten it, "
                       'ask again with "shrink": true (openstack gpu lease shrink)', codes.WOULD_SHORTEN)


def check_extension_rules(session: Session, now: int, row: m.Lease, new_end: int, window: int | None) -> None:
    """The rules an extension of a holding lease meets before the planner is asked:
    not under notice of an early end, in the extension window, within the budget."""
    old_end = committed_window(row)[1]
    if new_end <= old_end:
        return
    if row.early_end_at is not None:
        raise Conflict(f"the extension is refused: the lease is {row.early_end_kind} and ends at "
                       f"{rfc3339(to_epoch(row.early_end_at))}", codes.EXTENSION_REFUSED)
    too_early = window_refusal(now, old_end, window)
    if too_early:
        raise Conflict(f"the extension is refused: {too_early}", codes.EXTENSION_REFUSED)
    budgets.check(session, now, row.project_id, row.gpu_model,
                  Span(row.gpus_per_vm * row.instances, old_end, new_end), except_lease=None)

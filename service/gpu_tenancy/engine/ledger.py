"""The one writer of allocations: load what the planner needs, plan, and
commit the decisions under the ledger lock, so two requests can never take
the same GPUs."""
from __future__ import annotations

import dataclasses
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any
from dataclasses import dataclass

from sqlalchemy import Row, Select, func, select, update
from sqlalchemy.orm import Session, joinedload
from sqlalchemy.orm.attributes import flag_modified

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner
from gpu_tenancy.domain.held import held_until
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, Placement, Plan, PlannedLease, QuotaLimit
from gpu_tenancy.domain.start_by import MarginBasis, load_classes, model_gpus, start_by, waits_from
from gpu_tenancy.domain.states import RESERVING, LeaseState
from gpu_tenancy.engine import held, limits, start_by_margins
from gpu_tenancy.engine.events import record_transition
from gpu_tenancy.engine.fairshare_usage import decayed_usage
from gpu_tenancy.engine.gc_pause import collector_paused
from gpu_tenancy.engine.metrics import CREATE_REPLANS, PLANNER_SECONDS
from gpu_tenancy.timeutil import rfc3339

S = LeaseState
STARTING = (S.PROVISIONING.value, S.RESUMING.value)   # a start under way, with its deadline
LAST_ARRIVAL = 2 ** 62


@dataclass
class PlannerInputs:
    hosts: list[Host]
    holds: list[Hold]
    quotas: dict[tuple[str, str], QuotaLimit]
    waiting: list[LeaseRequest]
    usage: dict[tuple[str, str], float]
    # hosts where a lease past its planned end still holds GPUs: when the cloud releases them
    # is not known, so nothing is committed there for later (it is planned, and committed once free)
    unreleased: frozenset[str] = frozenset()
    allowance: int = 0   # the release allowance the holds were read with (engine/held.py)

    def load_classes(self, now: int) -> dict[str, int]:
        """Each project's load class now (domain/start_by.py), from the holds begun by now, the
        quotas' weights and the enabled hosts: what a start-by sample of a start now is kept in."""
        held: dict[tuple[str, str], float] = defaultdict(float)
        for h in self.holds:
            if h.start <= now:
                held[(h.project_id, h.gpu_model)] += h.gpus
        return load_classes(held, {key: q.weight for key, q in self.quotas.items()}, model_gpus(self.hosts))


def host_from_row(row: m.Host | Row[Any]) -> Host:   # an ORM object or a row of its table
    # a down, disabled or drained host takes nothing new
    return Host(row.name, row.gpu_model, row.gpus, enabled=row.enabled and row.up and not row.drained,
                aggregate=row.aggregate)


def quota_from_row(row: m.Quota | Row[Any]) -> QuotaLimit:
    return QuotaLimit(row.project_id, row.gpu_model, row.gpus, row.borrow_gpus, row.max_duration, row.weight)


def request_from_row(row: m.Lease) -> LeaseRequest:
    return LeaseRequest(
        lease_id=row.id, project_id=row.project_id, gpu_model=row.gpu_model, gpus_per_vm=row.gpus_per_vm,
        instances=row.instances, duration=row.duration, earliest_start=to_epoch(row.earliest_start),
        latest_start=to_epoch(row.latest_start), created_at=to_epoch(row.created_at),
        priority=row.priority, name=row.name, preemptible=row.preemptible, arrival=row.arrival or 0,
        first_eta=to_epoch(row.first_eta), guarded=bool(row.eta_guarded))


def load_inputs(session: Session, now: int, settings: planner.PlannerSettings,
                queued: list[m.Lease] | None = None) -> PlannerInputs:
    """Everything the planner reads, in four queries, as `settings` say (the fair-share
    half-life, the least release allowance); `queued`: the waiting lease rows, when the
    caller has loaded them already."""
    hosts = [host_from_row(h) for h in session.execute(select(m.Host.__table__).order_by(m.Host.name))]
    allowance = held.allowance(session, settings.release_floor)
    holds, usage, unreleased = load_allocations(session, now, settings.fairshare_half_life, allowance,
                                                settings.boot_timeout)
    quotas = {(q.project_id, q.gpu_model): quota_from_row(q) for q in session.execute(select(m.Quota.__table__))}
    waiting = [request_from_row(r) for r in (load_queued(session) if queued is None else queued)]
    return PlannerInputs(hosts, holds, quotas, waiting, usage, unreleased, allowance)


def load_queued(session: Session) -> list[m.Lease]:
    return list(session.scalars(
        select(m.Lease).where(m.Lease.status == S.QUEUED.value)
        .order_by(m.Lease.created_at, m.Lease.arrival, m.Lease.id)))


def load_allocations(session: Session, now: int, half_life: int, allowance: int = 0,
                     boot_timeout: int | None = None) -> tuple[list[Hold], dict[tuple[str, str], float], frozenset[str]]:
    """The holds (allocations of leases that hold GPUs, as long as domain/held.py says) and the
    decayed usage: plain columns, no ORM objects (there are thousands). A
    parked lease's allocations are its held resume slot: a hold like any other. A lease still
    starting (provisioning, resuming) past its end holds its GPUs until its start's deadline
    (`boot_timeout` after it began), when it fails or is tried again and its VMs are deleted,
    plus the allowance: not "the next second" (held_until), which would plan the next lease
    there at once, to wait for a release that the ledger can tell is that far off."""
    rows = session.execute(held_allocations()).all()
    deadlines = starting_deadlines(session, rows, now, boot_timeout)
    holds, unreleased = [], set()
    for r in rows:
        start, end = to_epoch(r.start_at), to_epoch(r.end_at)
        if r.status == S.ENDING.value or (end <= now and r.status != S.SCHEDULED.value):
            unreleased.add(r.host)
        held_to = held_until(max(end, deadlines.get(r.lease_id, end)), now, allowance)
        holds.append(Hold(r.lease_id, r.project_id, r.host, r.gpu_model, r.gpus, start,
                          held_to, r.borrowing, r.preemptible, r.priority, allowance,
                          (to_epoch(r.created_at), r.arrival or 0)))
    gone = held.releasing(session, now, allowance)   # VMs of re-placed leases the cloud still releases
    holds += gone
    unreleased.update(h.host for h in gone)
    # fair share's window of use, summed per project and model by the database
    return holds, decayed_usage(session, now, half_life), frozenset(unreleased)


def held_allocations() -> Select:
    """The allocations of the leases that hold GPUs (RESERVING), with their leases' columns the
    planner reads: found by the leases' status (ix_leases_status), then their allocations by
    lease (ix_allocations_lease_id). Fair share's window of use (every allocation in it, whatever
    its lease's state) is read apart, by ix_allocations_end_at. As one statement, `status IN
    (...) OR allocation in the window`, a condition over both tables that no index serves, each
    replan and each create read every allocation ever made, under the ledger lock."""
    a, lease = m.Allocation, m.Lease
    return (select(a.lease_id, a.project_id, a.host, a.gpu_model, a.gpus, a.start_at, a.end_at, a.borrowing,
                   lease.status, lease.preemptible, lease.priority, lease.created_at, lease.arrival)
            .join(lease).where(lease.status.in_([s.value for s in RESERVING])))


def starting_deadlines(session: Session, rows, now: int, boot_timeout: int | None) -> dict[str, int]:
    """Lease -> when its start fails (boot_timeout after it entered its state), for the leases
    still starting (provisioning, resuming) whose end has passed: rare, one query for them all."""
    starting = {r.lease_id: r.status for r in rows if r.status in STARTING and to_epoch(r.end_at) <= now}
    if boot_timeout is None or not starting:
        return {}
    e = m.Event
    entered = session.execute(select(e.lease_id, e.to_state, func.max(e.at)).where(
        e.lease_id.in_(starting), e.to_state.in_(STARTING)).group_by(e.lease_id, e.to_state)).all()
    return {lease_id: to_epoch(at) + boot_timeout for lease_id, state, at in entered if starting[lease_id] == state}


def run_planner(inputs: PlannerInputs, now: int, settings: planner.PlannerSettings,
                extra: Sequence[LeaseRequest] = ()) -> Plan:
    return planner.plan(now, inputs.hosts, inputs.holds, inputs.quotas, [*inputs.waiting, *extra],
                        inputs.usage, settings_for(inputs, settings))


def settings_for(inputs: PlannerInputs, settings: planner.PlannerSettings) -> planner.PlannerSettings:
    """The planner's settings, with the release allowance its inputs were read with."""
    return dataclasses.replace(settings, release_allowance=inputs.allowance)


def replan(session: Session, now: int, settings: planner.PlannerSettings, actor: str = "planner") -> Plan:
    """Plan every waiting lease and commit what the plan decides: leases whose
    start has come, and reservations that start exactly when asked, get their
    GPUs in the ledger (scheduled); the rest keep their position, ETA and reasons.
    Queued leases whose latest start has passed expire. The caller commits (the
    engine reads `now` once it holds the lock: early_ends.replan)."""
    ledger_lock(session)
    return replan_locked(session, now, settings, actor)


def replan_locked(session: Session, now: int, settings: planner.PlannerSettings, actor: str) -> Plan:
    with collector_paused():
        return _replan_locked(session, now, settings, actor)


def _replan_locked(session: Session, now: int, settings: planner.PlannerSettings, actor: str) -> Plan:
    limits.fail_unplannable(session, now, actor)
    # under the lock already held: one more statement on its row
    session.execute(update(m.Lock).where(m.Lock.name == "ledger").values(generation=m.Lock.generation + 1))
    # every lease is planned in full again: none is one a create fitted in (engine/plan_insert.py)
    session.execute(update(m.Lease).where(m.Lease.plan_seq.is_not(None)).values(plan_seq=None))
    rows: dict[str, m.Lease] = {}
    row: m.Lease | None   # a queued row, then the row of a planned lease
    for row in load_queued(session):
        if row.latest_start is not None and row.latest_start < utcnow_naive(now):
            expire(session, row, now, actor)
        else:
            rows[row.id] = row
    inputs = load_inputs(session, now, settings, queued=list(rows.values()))
    with PLANNER_SECONDS.time():
        plan = run_planner(inputs, now, settings)
    waiting = {r.lease_id: r for r in inputs.waiting}
    margins = start_by_margins.read(session)
    loads: dict[str, int] | None = None   # the projects' load classes, once a lease starts
    for planned in plan.leases.values():
        row = rows.get(planned.lease_id)
        if row is None:
            continue
        request = waiting[planned.lease_id]
        place = planned.placement
        if place is not None and (place.start <= now or (place.start == request.earliest_start
                                                          and inputs.unreleased.isdisjoint(place.hosts))):
            if loads is None:
                loads = inputs.load_classes(now)
            commit_allocation(session, row, planned, now, actor, loads.get(row.project_id, 0))
        else:
            write_queue_info(row, planned, now, start_by_margins.basis_of(margins, row.project_id),
                             planned.lease_id in plan.guarded)
    return plan


def generation(session: Session) -> int | None:
    """How many replans the ledger has seen: what is read from a plan made at one generation
    holds until the next (or until time has moved the plan on)."""
    return session.scalar(select(m.Lock.generation).where(m.Lock.name == "ledger"))


def plan_new(session: Session, clock: Callable[[], int], settings: planner.PlannerSettings, lease_id: str,
             replan: Callable[[Session, int, planner.PlannerSettings, str], Plan] | None = None) -> m.Lease:
    """Plan a lease that another transaction has just committed queued, and return it.

    Under the ledger lock: if a replan that loaded the queue after that commit has
    run meanwhile, the lease is planned already (no longer queued, or it has a queue
    position: a replan gives every queued lease it sees one), and it is only read.
    Otherwise one replan plans it and every lease committed before it. Under load,
    requests queue behind the lock while a replan runs, and the next replan serves
    them all. A lease committed but never planned here (its process died) is planned
    by the engine's next replan, as any queued lease. `replan`: how to replan under the lock
    (default: replan_locked; the engine's adds its early ends: early_ends.plan_new). The clock is
    read once the lock is held: a request that waited there plans at the time it plans, so its
    ETAs are not early by the wait. The caller commits."""
    ledger_lock(session)
    now = clock()
    # with what the API shows of it, in the same query (a new lease has none of them, or its new allocations)
    row = session.get_one(m.Lease, lease_id, populate_existing=True, options=[
        joinedload(m.Lease.allocations), joinedload(m.Lease.servers), joinedload(m.Lease.failures)])
    if row.status == S.QUEUED.value and row.queue_position is None:
        (replan or replan_locked)(session, now, settings, "planner")
        CREATE_REPLANS.labels("replanned").inc()
    else:
        CREATE_REPLANS.labels("shared").inc()
    return row


def expire(session: Session, row: m.Lease, now: int, actor: str) -> None:
    record_transition(session, row, S.EXPIRED, now, actor, "its latest start passed before GPUs were free for it")
    clear_queue_info(row)


def commit_allocation(session: Session, row: m.Lease, planned: PlannedLease, now: int, actor: str,
                      load: int | None = None) -> None:
    """`load`: its project's load class now (a start-by sample's, if this is one)."""
    place = add_allocations(session, row, planned)
    start_by_margins.record_start(session, row, place.start, load)
    hosts = ", ".join(sorted(set(place.hosts)))
    when = "now" if place.start <= now else f"at {rfc3339(place.start)}"
    why = f"GPUs reserved on {hosts}, starting {when}"
    if planned.borrowing:
        why += "; borrowing idle capacity beyond the project's quota"
    # never stamped before the lease was asked for (another process's clock may lag)
    record_transition(session, row, S.SCHEDULED, max(now, to_epoch(row.created_at)), actor, why)
    clear_queue_info(row)


def add_allocations(session: Session, row: m.Lease, planned: PlannedLease) -> Placement:
    """The planned placement as the lease's allocations and committed window; returns it."""
    place = planned.placement
    assert place is not None   # only placed leases are committed
    start, end = utcnow_naive(place.start), utcnow_naive(place.end)
    for index, host_name in enumerate(place.hosts):
        # through the relationship: a loaded allocations list gets it too, an unloaded one is not loaded
        session.add(m.Allocation(lease=row, project_id=row.project_id, vm_index=index,
                                 host=host_name, gpu_model=row.gpu_model, gpus=row.gpus_per_vm,
                                 start_at=start, end_at=end, borrowing=planned.borrowing))
    row.start_at, row.end_at, row.borrowing = start, end, planned.borrowing
    return place


def held_slot(session: Session, row: m.Lease, now: int, earliest: int, duration: int,
              settings: planner.PlannerSettings) -> PlannedLease:
    """Where a parked lease's remaining `duration` goes: planned as a new lease of the same
    shape and VMs would be, after every waiting lease and at or after `earliest`, so no
    waiting lease is planned later for it. Its own allocations must be gone already; the
    caller holds the ledger lock (and commits the placement: add_allocations)."""
    inputs = load_inputs(session, now, settings)
    request = newest(dataclasses.replace(request_from_row(row), duration=duration, earliest_start=earliest,
                                         latest_start=None, first_eta=None, guarded=False))
    return run_planner(inputs, now, settings, extra=[request]).leases[row.id]


QUEUE_INFO = ("queue_position", "queue_eta", "queue_reasons", "start_at", "end_at", "planned_hosts", "eta_guarded")


def write_queue_info(row: m.Lease, planned: PlannedLease, now: int, margin: MarginBasis,
                     guarded: bool = False) -> None:
    """A waiting lease's position, ETA, reasons, planned window and hosts, whether it goes by
    its first ETA (`guarded`: the planner's keep_etas), and its first ETA if it has none yet,
    with the start-by told beside it (from its project's `margin`: domain/start_by.py).
    Unchanged, it is not written; changed, it is written whole, so that the flush sends
    every changed lease in one batch (rows of differing columns would each be a statement)."""
    place = planned.placement
    values = (planned.position, utcnow_naive(planned.eta) if planned.eta is not None else None,
              [{"code": r.code, "message": r.message} for r in planned.reasons],
              utcnow_naive(place.start) if place else None, utcnow_naive(place.end) if place else None,
              list(place.hosts) if place else None, guarded)
    if tuple(getattr(row, column) for column in QUEUE_INFO) == values:
        return
    for column, value in zip(QUEUE_INFO, values):
        setattr(row, column, value)
        flag_modified(row, column)
    row.start_by_ratio = ratio = margin.ratio
    row.start_by_basis = ({"source": margin.source, "samples": margin.samples, "load_class": margin.load_class}
                          if margin.source else None)
    # the promise its real start will be held against, never moved; flagged on every
    # changed row so that all of them still have the same columns (one batch)
    if row.first_eta is None and planned.eta is not None:
        row.first_eta, row.eta_told_at = values[1], utcnow_naive(now)
        row.first_start_by = utcnow_naive(start_by(waits_from(now, to_epoch(row.earliest_start)), planned.eta, ratio))
    for column in ("first_eta", "first_start_by", "eta_told_at", "start_by_ratio", "start_by_basis"):
        flag_modified(row, column)


def clear_queue_info(row: m.Lease) -> None:
    row.queue_position, row.queue_eta, row.queue_reasons, row.planned_hosts = None, None, [], None


def dry_run(session: Session, now: int, settings: planner.PlannerSettings, request: LeaseRequest) -> PlannedLease:
    """Where a lease would land if it were asked for now; writes nothing."""
    return dry_run_on(load_inputs(session, now, settings), now, settings, request)


def dry_run_on(inputs: PlannerInputs, now: int, settings: planner.PlannerSettings,
               request: LeaseRequest) -> PlannedLease:
    """dry_run on inputs loaded already (the counter-offers read the same)."""
    return run_planner(inputs, now, settings, extra=[newest(request)]).leases[request.lease_id]


def newest(request: LeaseRequest) -> LeaseRequest:
    """A lease as if asked for now: after every lease asked so far."""
    return dataclasses.replace(request, arrival=LAST_ARRIVAL)


def new_lease_id() -> str:
    return str(uuid.uuid4())

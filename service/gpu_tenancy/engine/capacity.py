"""Capacity figures read from the hosts and the ledger: GPUs per model now,
and each host's free GPUs over a window (the capacity calendar). GPUs are
"held" as domain/held.py says: until the cloud has released them; the calendar
also counts, apart, the GPUs the plan has waiting leases take, as their hold would."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.calendar import calendar_steps
from gpu_tenancy.domain.capacity import largest_free_block
from gpu_tenancy.domain.model import Hold
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.states import HOLDING, WAITING, LeaseState
from gpu_tenancy.engine.held import allowance, held_between
from gpu_tenancy.engine import plan_insert
from gpu_tenancy.engine.ledger import host_from_row, load_inputs, run_planner


@dataclass
class ModelCapacity:
    hosts: int = 0
    hosts_in_service: int = 0
    gpus: int = 0               # on every host of the model
    in_use: int = 0             # held now (not yet released), on any host
    free: int = 0               # free now on hosts in service
    largest_free_block: int = 0
    waiting_leases: int = 0


@dataclass
class HostCalendar:
    host: str
    gpu_model: str
    gpus: int
    in_service: bool
    free: list[tuple[int, int, int, int]]  # (from, to, free GPUs, GPUs planned for waiting leases)


def holds_between(session: Session, start: int, end: int,
                  statuses: frozenset[LeaseState] = HOLDING, project_id: str | None = None) -> list[Hold]:
    """The ledger's allocations of leases in `statuses` that overlap [start, end) as
    planned, of one project or of all (None): what was used, for usage. What is held
    (until released) is engine/held.py's held_between."""
    q = select(m.Allocation).join(m.Lease).where(
        m.Lease.status.in_([s.value for s in statuses]),
        m.Allocation.start_at < utcnow_naive(end), m.Allocation.end_at > utcnow_naive(start))
    if project_id is not None:
        q = q.where(m.Allocation.project_id == project_id)
    rows = session.scalars(q)
    return [Hold(a.lease_id, a.project_id, a.host, a.gpu_model, a.gpus, to_epoch(a.start_at),
                 to_epoch(a.end_at), a.borrowing) for a in rows]


def now_by_model(session: Session, now: int, floor: int) -> dict[str, ModelCapacity]:
    """Each GPU model's figures now; `floor`: the least release allowance (PlannerSettings.release_floor)."""
    hosts = [host_from_row(h) for h in session.scalars(select(m.Host).order_by(m.Host.name))]
    holds = held_between(session, now, now, now + 1, allowance(session, floor))
    used: dict[str, int] = defaultdict(int)
    for hold in holds:
        used[hold.host] += hold.gpus
    out: dict[str, ModelCapacity] = defaultdict(ModelCapacity)
    for host in hosts:
        figures = out[host.gpu_model]
        figures.hosts += 1
        figures.gpus += host.gpus
        figures.in_use += used[host.name]
        if host.enabled:
            figures.hosts_in_service += 1
            figures.free += max(0, host.gpus - used[host.name])
    for model, figures in out.items():
        figures.largest_free_block = largest_free_block(hosts, holds, model, now)
    waiting = session.execute(select(m.Lease.gpu_model, func.count()).where(
        m.Lease.status.in_([s.value for s in WAITING])).group_by(m.Lease.gpu_model))
    for model, count in waiting:
        out[model].waiting_leases = count
    return dict(sorted(out.items()))


def calendar(session: Session, start: int, end: int, floor: int, now: int | None = None,
             planned: Sequence[Hold] = ()) -> list[HostCalendar]:
    """Each host's free GPUs over [start, end), as held at `now` (default: start), with the
    GPUs of `planned` (planned_for_waiting) apart; `floor`: the least release allowance
    (PlannerSettings.release_floor)."""
    by_host: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for hold in held_between(session, start if now is None else now, start, end, allowance(session, floor)):
        by_host[hold.host].append((hold.start, hold.end, hold.gpus))
    planned_on: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for hold in planned:
        planned_on[hold.host].append((hold.start, hold.end, hold.gpus))
    out = []
    for row in session.scalars(select(m.Host).order_by(m.Host.name)):
        host = host_from_row(row)
        out.append(HostCalendar(host.name, host.gpu_model, host.gpus, host.enabled,
                                calendar_steps(host.gpus, by_host[host.name], planned_on[host.name], start, end)))
    return out


def planned_for_waiting(session: Session, now: int, settings: PlannerSettings) -> list[Hold]:
    """What the plan has the waiting leases hold, per VM and host, until their GPUs are back
    (the release allowance after the planned end, as a hold): the engine's plan at `now`, made
    again (it writes nothing), since a waiting lease's hosts are not stored."""
    inputs = load_inputs(session, now, settings)
    if not inputs.waiting:
        return []
    requests = {lr.lease_id: lr for lr in inputs.waiting}
    out = []
    for planned in run_planner(inputs, now, settings).leases.values():
        place, lr = planned.placement, requests[planned.lease_id]
        if place is None:
            continue
        out += [Hold(lr.lease_id, lr.project_id, host, lr.gpu_model, lr.gpus_per_vm, place.start,
                     place.end + inputs.allowance, planned.borrowing, lr.preemptible, lr.priority, inputs.allowance)
                for host in place.hosts]
    return out


@dataclass
class PlannedCache:
    """planned_for_waiting, made once per replan: kept while the ledger has not replanned since
    (its generation), nor fitted a lease in or taken one out (its `inserted` count: neither
    replans, engine/plan_insert.py and plan_remove.py), and for less than `max_age` s (time
    moving on moves the plan too), so a tenant reading the calendar in a loop costs one plan per engine pass, not one per call.
    Each app its own; one per process."""
    max_age: int
    # ((generation, inserted), made at, holds), swapped whole: threads of a worker share it
    last: tuple[tuple[int, ...] | None, int, list[Hold]] | None = field(default=None)

    def planned_for_waiting(self, session: Session, now: int, settings: PlannerSettings) -> list[Hold]:
        # read before the plan's inputs: a replan committed between the two only makes the next call plan again
        counts = session.execute(plan_insert.COUNTS).one_or_none()
        version = tuple(counts) if counts is not None else None
        last = self.last
        if last is not None and last[0] == version and 0 <= now - last[1] < self.max_age:
            return last[2]
        holds = planned_for_waiting(session, now, settings)
        self.last = (version, now, holds)
        return holds

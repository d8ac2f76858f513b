"""GPU hosts as the cloud last reported them (up, enabled), with the admin's
drain on top: a drained host takes no new leases, the leases running there run
to their end, and those only planned there (and parked leases' held resume slots)
move to other hosts, so that the host is empty once its last running lease ends
(`held_until`)."""
from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, to_epoch
from gpu_tenancy.domain.states import HOLDING, LeaseState
from gpu_tenancy.domain.held import held_until as held_until_
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.config import Config
from gpu_tenancy.engine import early_ends, held, park, retry
from gpu_tenancy.engine.capacity import calendar
from gpu_tenancy.engine.events import lease_in, record_event


def in_use_now(session: Session, now: int, floor: int) -> dict[str, int]:
    """GPUs held on each host at this instant (until the cloud has released them)."""
    return {h.host: h.gpus - (h.free[0][2] if h.free else h.gpus) for h in calendar(session, now, now + 1, floor)}


def listing(session: Session) -> list[m.Host]:
    return list(session.scalars(select(m.Host).order_by(m.Host.gpu_model, m.Host.name)))


def find(session: Session, name: str) -> m.Host | None:
    return session.get(m.Host, name)


def held_until(session: Session, now: int, floor: int) -> dict[str, int]:
    """When the GPUs of each host's last lease holding GPUs there (running or planned) are
    expected back: its end plus the release allowance, and later while not released."""
    rows = session.execute(select(m.Allocation.host, func.max(m.Allocation.end_at)).join(m.Lease)
                           .where(m.Lease.status.in_([s.value for s in HOLDING])).group_by(m.Allocation.host))
    allowance = held.allowance(session, floor)
    return {host: held_until_(to_epoch(end), now, allowance) for host, end in rows}


def set_drained(session: Session, row: m.Host, drained: bool, clock: Callable[[], int], config: Config,
                settings: PlannerSettings, actor: str) -> list[str]:
    """Drain or undrain; on drain, the leases only planned there are planned again on
    other hosts, for their planned start or the first time after it, and so are parked
    leases' held slots there (park.move_slot), from the time read once the ledger lock is held
    (not from before a wait there: in the past by the wait). Returns their ids. A change is
    followed by the engine's whole replan (early_ends.replan_at), as a quota's is: the waiting
    leases planned on the host are told where they go now, and the plan a create is fitted into
    (engine/plan_insert.py, kept until the ledger replans) never counts a drained host's GPUs."""
    if drained or row.drained:   # no replan may plan a lease there meanwhile; and before the leases' rows
        ledger_lock(session)     # (lease_in's order)
    now = clock()
    # the cloud's refresh (lifecycle.refresh_hosts) leaves this column alone
    was, row.drained = row.drained, drained
    if was == drained:
        return []
    moved = move_off(session, row, now, settings, actor) if drained else []
    session.flush()
    early_ends.replan_at(session, now, config, settings, actor)
    return moved


def move_off(session: Session, row: m.Host, now: int, settings: PlannerSettings, actor: str) -> list[str]:
    """The leases scheduled or parked on the host being drained, planned again elsewhere."""
    session.flush()
    planned_here = select(m.Allocation.lease_id).where(m.Allocation.host == row.name)
    found = session.execute(select(m.Lease.id, m.Lease.status).where(
        m.Lease.status.in_((LeaseState.SCHEDULED.value, LeaseState.PARKED.value)), m.Lease.id.in_(planned_here))
        .order_by(func.coalesce(m.Lease.resume_by, m.Lease.start_at))).all()   # by when each takes the GPUs
    moved = []
    for lease_id, status in found:
        lease = lease_in(session, lease_id, LeaseState(status))   # its row, after the ledger lock
        if lease is None:
            continue
        moved.append(lease)
        if status == LeaseState.PARKED.value:
            park.move_slot(session, lease, now, settings, actor, "host_drain", f"the host of its held resume "
                           f"slot, {row.name}, is being drained by an operator")
            continue
        assert lease.start_at is not None   # a scheduled lease has its start
        start = max(to_epoch(lease.start_at), now)
        retry.replace(session, lease, now, start, avoid=[row.name], settings=settings, actor=actor,
                      duration=lease.duration)
        record_event(session, lease, "host_drain", f"its planned host {row.name} is being drained by an "
                     f"operator; the lease is {retry.describe_placement(lease, now)}", now, actor)
    return [lease.id for lease in moved]

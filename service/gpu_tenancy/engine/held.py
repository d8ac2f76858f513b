"""The one notion of "held" (domain/held.py), read from the ledger: the allocations
of leases holding GPUs, and the GPUs of VMs dropped from a re-placed lease that the
cloud is still releasing (engine/releasing.py), each until its GPUs are released; and
the release allowance, from the release times the engine measures."""
from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.held import held_until, release_allowance
from gpu_tenancy.domain.model import Hold
from gpu_tenancy.domain.states import HOLDING

SAMPLES = 20   # the allowance follows the cloud's last this many releases
KEPT = 100     # rows of measured release times kept


def allowance(session: Session, floor: int) -> int:
    """The release allowance: from the cloud's measured release times (or what it says a
    release takes, before any), never below `floor` (PlannerSettings.release_floor)."""
    measured = list(session.scalars(select(m.ReleaseTime.seconds).where(m.ReleaseTime.kind == "measured")
                                    .order_by(m.ReleaseTime.id.desc()).limit(SAMPLES)))
    nominal = None if measured else session.scalar(
        select(m.ReleaseTime.seconds).where(m.ReleaseTime.kind == "nominal").order_by(m.ReleaseTime.id.desc())
        .limit(1))
    return release_allowance(measured, nominal, floor)


def record_release(session: Session, now: int, seconds: int) -> None:
    """A lease's VMs, deleted `seconds` ago, have released their GPUs."""
    session.add(m.ReleaseTime(kind="measured", at=utcnow_naive(now), seconds=max(0, seconds)))
    session.flush()
    newest = session.scalars(select(m.ReleaseTime.id).order_by(m.ReleaseTime.id.desc()).limit(1)).one()
    session.execute(delete(m.ReleaseTime).where(m.ReleaseTime.kind == "measured",
                                                m.ReleaseTime.id <= newest - KEPT))


def set_nominal(session: Session, now: int, seconds: int | None) -> None:
    """What the cloud says a release takes (None: it does not say)."""
    row = session.scalar(select(m.ReleaseTime).where(m.ReleaseTime.kind == "nominal").limit(1))
    if seconds is None:
        if row is not None:
            session.delete(row)
    elif row is None:
        session.add(m.ReleaseTime(kind="nominal", at=utcnow_naive(now), seconds=seconds))
    elif row.seconds != seconds:
        row.seconds, row.at = seconds, utcnow_naive(now)


def held_between(session: Session, now: int, start: int, end: int, allow: int,
                 hosts: list[str] | None = None) -> list[Hold]:
    """The holds over [start, end): allocations of leases holding GPUs, each held until
    its planned end plus the allowance `allow` (allowance()), and at least past `now`
    (not released yet)."""
    a = m.Allocation
    q = (select(a.lease_id, a.project_id, a.host, a.gpu_model, a.gpus, a.start_at, a.end_at, a.borrowing,
                m.Lease.preemptible, m.Lease.priority).join(m.Lease)
         .where(m.Lease.status.in_([s.value for s in HOLDING]), a.start_at < utcnow_naive(end)))
    if hosts is not None:
        q = q.where(a.host.in_(hosts))
    out = []
    for r in session.execute(q):
        until = held_until(to_epoch(r.end_at), now, allow)
        if until > start:
            out.append(Hold(r.lease_id, r.project_id, r.host, r.gpu_model, r.gpus, to_epoch(r.start_at), until,
                            r.borrowing, r.preemptible, r.priority, allow))
    return out + [h for h in releasing(session, now, allow, hosts) if h.end > start]


def releasing(session: Session, now: int, allowance_s: int, hosts: list[str] | None = None) -> list[Hold]:
    """The GPUs the cloud is still releasing for VMs dropped from a re-placed lease: held
    from their delete until the allowance after it, and past `now` until released. Their
    own hold name keeps them apart from the lease's new VMs (its start waits for them too)."""
    r, lease = m.ReleasingGpus, m.Lease
    q = select(r.lease_id, r.vm_index, r.host, r.gpu_model, r.gpus, r.since, lease.project_id, lease.preemptible,
               lease.priority).join(lease)
    if hosts is not None:
        q = q.where(r.host.in_(hosts))
    return [Hold(releasing_name(row.lease_id, row.vm_index), row.project_id, row.host, row.gpu_model, row.gpus,
                 to_epoch(row.since), held_until(to_epoch(row.since), now, allowance_s), False, row.preemptible,
                 row.priority, allowance_s)
            for row in session.execute(q)]


def releasing_name(lease_id: str, vm_index: int) -> str:
    return f"{lease_id} (vm{vm_index}, being released)"


def dropped_from(hold_name: str, lease_id: str) -> bool:
    """Whether a hold is a VM dropped from the lease and still being released (releasing_name)."""
    return hold_name.startswith(f"{lease_id} (vm")


def unreleased_on(session: Session, row: m.Lease, now: int, floor: int) -> dict[str, list[str]]:
    """The hosts of a lease about to start whose GPUs other leases still hold at `now`, so
    that its VMs would not fit there yet: host -> those leases. A host where a VM dropped from
    this lease is still being released is one too, whatever the GPUs: that VM holds a unit of
    the lease's class there (Placement frees it with the GPUs), so a VM of it booted there now
    finds none (no valid host)."""
    mine: dict[str, int] = {}
    for alloc in row.allocations:
        mine[alloc.host] = mine.get(alloc.host, 0) + alloc.gpus
    if not mine:
        return {}
    others = [h for h in held_between(session, now, now, now + 1, allowance(session, floor), hosts=list(mine))
              if h.lease_id != row.id]
    sizes = dict(session.execute(select(m.Host.name, m.Host.gpus).where(m.Host.name.in_(list(mine)))).all())
    out = {}
    for host, need in sorted(mine.items()):
        on_host = [h for h in others if h.host == host]
        if sizes.get(host, 0) - sum(h.gpus for h in on_host) < need or any(
                dropped_from(h.lease_id, row.id) for h in on_host):
            out[host] = sorted({h.lease_id for h in on_host})
    return out

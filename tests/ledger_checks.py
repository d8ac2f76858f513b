"""Checks of the ledger read in one session (one snapshot, on PostgreSQL in REPEATABLE READ):
each returns the promises broken, in words. Every lease's allocations count: a reserving lease's
(domain/states.py RESERVING: a parked lease's resume slot too) hold GPUs, and a finished lease's,
cut at its end, are what it held at the instants they cover."""
from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.states import FINAL, RESERVING, LeaseState as S


def overcommits_in(s: Session) -> list[str]:
    """Every instant at which some host holds more GPUs than it has."""
    capacity = {h.name: h.gpus for h in s.scalars(select(m.Host))}
    by_host = defaultdict(list)
    for a in s.execute(select(m.Allocation.host, m.Allocation.start_at, m.Allocation.end_at, m.Allocation.gpus)):
        by_host[a.host].append((to_epoch(a.start_at), to_epoch(a.end_at), a.gpus))
    return [f"{host} holds {used} of {capacity[host]} at {instant}"
            for host, spans in by_host.items() for instant, used in peaks(spans, capacity[host])]


def peaks(spans: list[tuple[int, int, int]], limit: int) -> list[tuple[int, int]]:
    """(instant, total) wherever the [start, end) spans' amounts add up to more than `limit`,
    in one sweep (a span ending at an instant no longer counts there)."""
    changes = sorted([(start, gpus) for start, _, gpus in spans] + [(end, -gpus) for _, end, gpus in spans])
    over, total = [], 0
    for i, (instant, delta) in enumerate(changes):
        total += delta
        last_at_instant = i + 1 == len(changes) or changes[i + 1][0] != instant
        if last_at_instant and total > limit:
            over.append((instant, total))
    return over


def quota_overruns_in(s: Session) -> list[str]:
    """Every instant at which a project holds more GPUs of a model than its quota and borrowing
    allow; a preemptible lease's allocations, outside quota on idle GPUs, do not count."""
    limits = {(q.project_id, q.gpu_model): q.gpus + q.borrow_gpus for q in s.scalars(select(m.Quota))}
    spans = defaultdict(list)
    a = m.Allocation
    for row in s.execute(select(a.project_id, a.gpu_model, a.start_at, a.end_at, a.gpus).join(m.Lease)
                         .where(m.Lease.preemptible.is_(False))):
        spans[(row.project_id, row.gpu_model)].append((to_epoch(row.start_at), to_epoch(row.end_at), row.gpus))
    return [f"{key} holds {held} > {limits.get(key, 0)} at {instant}"
            for key, items in spans.items() for instant, held in peaks(items, limits.get(key, 0))]


def holding_mismatches_in(s: Session) -> list[str]:
    """Leases whose allocations disagree with their state: a waiting, cancelled or expired lease
    has none; a lease that reserves GPUs and is not ending has one per VM, of its project, model
    and size, ending when it ends; an ending lease keeps those it began (its end cut them), and a
    finished one's end by when it finished (a window is at least a second)."""
    leases = {r.id: r for r in s.execute(select(
        m.Lease.id, m.Lease.status, m.Lease.project_id, m.Lease.gpu_model, m.Lease.gpus_per_vm,
        m.Lease.instances, m.Lease.end_at, m.Lease.updated_at))}
    allocations: dict[str, list] = {}
    for a in s.execute(select(m.Allocation.lease_id, m.Allocation.vm_index, m.Allocation.project_id,
                              m.Allocation.gpu_model, m.Allocation.gpus, m.Allocation.start_at,
                              m.Allocation.end_at)):
        allocations.setdefault(a.lease_id, []).append(a)
    empty = {S.REQUESTED, S.QUEUED, S.CANCELLED, S.EXPIRED}
    whole = RESERVING - {S.ENDING}
    bad = []
    for lease in leases.values():
        mine, state = allocations.get(lease.id, []), S(lease.status)
        if state in empty and mine:
            bad.append(f"{lease.id} is {state} with {len(mine)} allocations")
        if state in whole and sorted(a.vm_index for a in mine) != list(range(lease.instances)):
            bad.append(f"{lease.id} is {state} with VMs {sorted(a.vm_index for a in mine)} of {lease.instances}")
        for a in mine:
            if (a.project_id, a.gpu_model, a.gpus) != (lease.project_id, lease.gpu_model, lease.gpus_per_vm):
                bad.append(f"{lease.id}'s allocation {a.vm_index} is {a.project_id} {a.gpus} {a.gpu_model}")
            if state in whole and a.end_at != lease.end_at:
                bad.append(f"{lease.id} is {state} to {lease.end_at}, its VM {a.vm_index}'s GPUs to {a.end_at}")
            if state in FINAL and to_epoch(a.end_at) > max(to_epoch(lease.updated_at), to_epoch(a.start_at) + 1):
                bad.append(f"{lease.id} is {state} since {lease.updated_at}, its VM {a.vm_index}'s GPUs held "
                           f"to {a.end_at}")
    return bad

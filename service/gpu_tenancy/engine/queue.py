"""Everyone's queue (Slurm's squeue): every waiting lease, in the planner's order per
GPU model, with what the last replan wrote on it (position, ETA, reasons)."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import WAITING

# what the queue shows of a lease
COLUMNS = (m.Lease.id, m.Lease.name, m.Lease.project_id, m.Lease.status, m.Lease.shape, m.Lease.gpu_model,
           m.Lease.gpus_per_vm, m.Lease.instances, m.Lease.earliest_start, m.Lease.created_at,
           m.Lease.queue_position, m.Lease.queue_eta, m.Lease.queue_reasons, m.Lease.priority,
           m.Lease.preemptible, m.Lease.start_by_ratio)


def waiting(session: Session, gpu_model: str | None = None) -> list[Row]:
    """The waiting leases (requested, queued), by GPU model and then planned position; a lease
    not planned yet (just asked for) comes after those that are, in the order asked."""
    q = select(*COLUMNS).where(m.Lease.status.in_([s.value for s in WAITING]))
    if gpu_model is not None:
        q = q.where(m.Lease.gpu_model == gpu_model)
    q = q.order_by(m.Lease.gpu_model, m.Lease.queue_position.is_(None), m.Lease.queue_position,
                   m.Lease.created_at, m.Lease.arrival, m.Lease.id)
    return list(session.execute(q))

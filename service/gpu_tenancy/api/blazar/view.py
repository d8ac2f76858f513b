"""What the Blazar-compatible API shows of a lease: Blazar's lease with its one
instance reservation and its start_lease and end_lease events, in Blazar's field
names and time form (blazarclient parses them back: `lease update --prolong-for`).

One gpu-tenancy lease is one Blazar lease with one `flavor:instance` reservation
(a `virtual:instance` ask is shown as the flavor reservation it became). The
reservation's `flavor_id` is the lease's own flavor, the one to boot with: Nova
has it from the lease's start until its end (engine/lease_flavor.py), so it is
null before. `resource_properties` names the shape it was made from, as Blazar's
names its source flavor. Ids of the reservation and events are derived from the
lease's id, so they are the same in every answer without being stored.
"""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.domain import blazar
from gpu_tenancy.domain.blazar import FLAVOR_INSTANCE, BlazarStatus, event_id, reservation_id
from gpu_tenancy.domain.states import LeaseState


# what render() reads of a lease: all a listing loads (not user_data, up to 64 KB, nor the plan's columns)
SHOWN = (m.Lease.id, m.Lease.name, m.Lease.user_id, m.Lease.project_id, m.Lease.status, m.Lease.start_at,
         m.Lease.end_at, m.Lease.queue_eta, m.Lease.earliest_start, m.Lease.duration, m.Lease.created_at,
         m.Lease.updated_at, m.Lease.instances, m.Lease.flavor_id, m.Lease.flavor_name, m.Lease.shape,
         m.Lease.gpu_model, m.Lease.gpus_per_vm)


def window(row: Any) -> tuple[int, int]:
    """The start and end a Blazar client is shown (and a notice tells): the committed ones,
    else (waiting) the queue's ETA or the asked start, and its duration after it."""
    return blazar.window(row.start_at, row.end_at, row.queue_eta or row.earliest_start, row.duration)


def visible(row: m.Lease) -> bool:
    return blazar.blazar_status(row.status).shown


def render(row: Any, shape: m.Shape | None) -> dict:
    """`row`: a lease, or a row of its SHOWN columns."""
    shown = blazar.blazar_status(row.status)
    start, end = window(row)
    created, updated = blazar.date(row.created_at), blazar.date(row.updated_at)
    return {
        "id": row.id,
        "name": row.name,
        "user_id": row.user_id,
        "project_id": row.project_id,
        "start_date": blazar.date(start),
        "end_date": blazar.date(end),
        "trust_id": None,
        "status": shown.lease,
        "degraded": False,
        "created_at": created,
        "updated_at": updated,
        "reservations": [render_reservation(row, shape, shown, created, updated)],
        "events": [render_event(row, blazar.START_LEASE, start, shown, created, updated),
                   render_event(row, blazar.END_LEASE, end, shown, created, updated)],
        # what Blazar has no word for: the lease's own state (queued, scheduled, ...)
        "gpu_tenancy_status": row.status,
    }


def render_reservation(row: Any, shape: m.Shape | None, shown: BlazarStatus, created: str | None,
                       updated: str | None) -> dict:
    return {
        "id": reservation_id(row.id),
        "lease_id": row.id,
        "resource_id": row.id,
        "resource_type": FLAVOR_INSTANCE,
        "status": shown.reservation,
        "missing_resources": False,
        "resources_changed": False,
        "vcpus": shape.vcpus if shape else None,
        "memory_mb": shape.ram_mb if shape else None,
        "disk_gb": shape.disk_gb if shape else None,
        "amount": row.instances,
        "affinity": None,
        "flavor_id": row.flavor_id,
        "flavor_name": row.flavor_name,
        "aggregate_id": None,
        "server_group_id": None,
        "resource_properties": json.dumps({"shape": row.shape, "gpu_model": row.gpu_model,
                                           "gpus": row.gpus_per_vm}),
        "created_at": created,
        "updated_at": updated,
    }


def render_event(row: Any, kind: str, at: int, shown: BlazarStatus, created: str | None,
                 updated: str | None) -> dict:
    return {"id": event_id(row.id, kind), "lease_id": row.id, "event_type": kind, "time": blazar.date(at),
            "status": shown.event(kind), "created_at": created, "updated_at": updated}


def render_one(session: Session, row: m.Lease) -> dict:
    return render(row, session.get(m.Shape, row.shape))


def listing(session: Session, project_id: str | None) -> list[dict]:
    """Every lease Blazar would show of a project (None: of all), oldest first: as plain rows
    of the columns shown (Blazar's listing has no pages, so each row is kept small)."""
    query = select(*SHOWN).where(m.Lease.status != LeaseState.CANCELLED.value)
    if project_id is not None:
        query = query.where(m.Lease.project_id == project_id)
    shapes = {s.name: s for s in session.scalars(select(m.Shape))}
    return [render(row, shapes.get(row.shape))
            for row in session.execute(query.order_by(m.Lease.created_at, m.Lease.id))]

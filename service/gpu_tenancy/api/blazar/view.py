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
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.blazar_status import BlazarStatus, blazar_status
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.timeutil import blazar_stamp

FLAVOR_INSTANCE = "flavor:instance"
# the namespace of the derived ids (a fixed random uuid: the ids mean nothing outside this API)
IDS = uuid.UUID("0c1f5c8e-3d0b-4b8e-9a51-6f3b2a7d9e41")


def reservation_id(lease_id: str) -> str:
    return str(uuid.uuid5(IDS, "reservation:" + lease_id))


def event_id(lease_id: str, kind: str) -> str:
    return str(uuid.uuid5(IDS, f"{kind}:{lease_id}"))


def window(row: m.Lease) -> tuple[int, int]:
    """The start and end a Blazar client is shown: the committed ones, else (waiting) the
    queue's ETA or the asked start, and its duration after it."""
    if row.start_at is not None and row.end_at is not None:
        return to_epoch(row.start_at), to_epoch(row.end_at)
    start = to_epoch(row.queue_eta or row.earliest_start)
    return start, start + row.duration


def visible(row: m.Lease) -> bool:
    return blazar_status(LeaseState(row.status)) is not None


def render(row: m.Lease, shape: m.Shape | None) -> dict:
    shown = blazar_status(LeaseState(row.status))
    assert shown is not None, "a cancelled lease is not shown (visible)"
    start, end = window(row)
    created, updated = blazar_stamp(row.created_at), blazar_stamp(row.updated_at)
    return {
        "id": row.id,
        "name": row.name,
        "user_id": row.user_id,
        "project_id": row.project_id,
        "start_date": blazar_stamp(start),
        "end_date": blazar_stamp(end),
        "trust_id": None,
        "status": shown.lease,
        "degraded": False,
        "created_at": created,
        "updated_at": updated,
        "reservations": [render_reservation(row, shape, shown, created, updated)],
        "events": [render_event(row, "start_lease", start, shown.started, created, updated),
                   render_event(row, "end_lease", end, shown.ended, created, updated)],
        # what Blazar has no word for: the lease's own state (queued, scheduled, ...)
        "gpu_tenancy_status": row.status,
    }


def render_reservation(row: m.Lease, shape: m.Shape | None, shown: BlazarStatus, created, updated) -> dict:
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


def render_event(row: m.Lease, kind: str, at: int, done: bool, created, updated) -> dict:
    return {"id": event_id(row.id, kind), "lease_id": row.id, "event_type": kind, "time": blazar_stamp(at),
            "status": "DONE" if done else "UNDONE", "created_at": created, "updated_at": updated}


def render_one(session: Session, row: m.Lease) -> dict:
    return render(row, session.get(m.Shape, row.shape))


def listing(session: Session, project_id: str | None) -> list[dict]:
    """Every lease Blazar would show of a project (None: of all), oldest first."""
    query = select(m.Lease).where(m.Lease.status != LeaseState.CANCELLED.value)
    if project_id is not None:
        query = query.where(m.Lease.project_id == project_id)
    shapes = {s.name: s for s in session.scalars(select(m.Shape))}
    return [render(row, shapes.get(row.shape))
            for row in session.scalars(query.order_by(m.Lease.created_at, m.Lease.id))]

"""Priority classes: admin-defined names for a lease's place in the order, whether
it is preemptible, and which projects may use it. A lease copies its class's
priority and preemptibility when it is asked for, so changing or removing a
class changes no lease already asked for."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive
from gpu_tenancy.errors import NotFound

# the demo's and a new cloud's classes: (priority, preemptible, projects (None: all), description)
DEFAULTS: dict[str, tuple[int, bool, list[str] | None, str]] = {
    "high": (10, False, [], "before normal leases; an admin lists the projects that may use it"),
    "normal": (0, False, None, "the usual class"),
    "low": (-10, False, None, "after normal leases"),
    "preemptible": (-100, True, None, "any size, outside quota, on idle GPUs only; ended with notice "
                                      "whenever another lease needs the GPUs"),
}


def listing(session: Session) -> list[m.PriorityClass]:
    return list(session.scalars(select(m.PriorityClass).order_by(m.PriorityClass.priority.desc(),
                                                                 m.PriorityClass.name)))


def get(session: Session, name: str) -> m.PriorityClass:
    row = session.get(m.PriorityClass, name) if len(name) <= 64 else None
    if row is None:
        raise NotFound(f"priority class '{name[:64]}' not found; GET /v1/priority_classes lists them",
                       "gpu_tenancy.priority_class_not_found")
    return row


def put(session: Session, now: int, name: str, fields: dict) -> m.PriorityClass:
    """Create the class or replace it; omitted fields take their defaults."""
    row = session.get(m.PriorityClass, name)
    if row is None:
        row = m.PriorityClass(name=name)
        session.add(row)
    row.priority = fields["priority"]
    row.preemptible = fields.get("preemptible", False)
    row.projects = fields.get("projects")
    row.description = fields.get("description", "")
    row.updated_at = utcnow_naive(now)
    session.flush()
    return row


def delete(session: Session, name: str) -> None:
    session.delete(get(session, name))


def seed_defaults(session: Session, now: int) -> None:
    for name, (priority, preemptible, projects, description) in DEFAULTS.items():
        if session.get(m.PriorityClass, name) is None:
            session.add(m.PriorityClass(name=name, priority=priority, preemptible=preemptible, projects=projects,
                                        description=description, updated_at=utcnow_naive(now)))

"""GPU hosts as the cloud last reported them (up, enabled), with the admin's
drain on top: a drained host takes no new leases, and the leases already
placed there keep their place."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.engine.capacity import calendar


def in_use_now(session: Session, now: int) -> dict[str, int]:
    """GPUs held on each host at this instant."""
    return {h.host: h.gpus - (h.free[0][2] if h.free else h.gpus) for h in calendar(session, now, now + 1)}


def listing(session: Session) -> list[m.Host]:
    return list(session.scalars(select(m.Host).order_by(m.Host.gpu_model, m.Host.name)))


def find(session: Session, name: str) -> m.Host | None:
    return session.get(m.Host, name)


def set_drained(row: m.Host, drained: bool) -> None:
    # the cloud's refresh (lifecycle.refresh_hosts) leaves this column alone
    row.drained = drained

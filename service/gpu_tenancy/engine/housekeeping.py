"""What the engine does now and then rather than every tick: fold the last closed hours
into /metrics' running totals (engine/metric_rollups.py), then prune the agents' hourly
GPU-use figures older than gpu_use_retention_days (only hours already folded in, so no
counter goes down)."""
from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.engine import metric_rollups

EVERY = 3600   # seconds between two runs


def run(sessions: sessionmaker[Session], now: int, config: Config) -> None:
    with session_scope(sessions) as session:
        folded = metric_rollups.advance(session, now)
        prune_gpu_use(session, min(now - config.gpu_use_retention_days * 86400, folded))


def prune_gpu_use(session: Session, before: int) -> int:
    """Delete the hourly GPU-use rows of hours before `before`; returns how many."""
    gone = session.execute(delete(m.GpuUseHour).where(m.GpuUseHour.hour < utcnow_naive(before)))
    return int(gone.rowcount)   # type: ignore[attr-defined]

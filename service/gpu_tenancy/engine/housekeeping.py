"""What the engine does now and then rather than every tick: fold the last closed hours
into /metrics' running totals (engine/metric_rollups.py)."""
from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy.config import Config
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine import metric_rollups

EVERY = 3600   # seconds between two runs


def run(sessions: sessionmaker[Session], now: int, config: Config) -> None:
    with session_scope(sessions) as session:
        metric_rollups.advance(session, now)

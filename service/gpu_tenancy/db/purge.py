"""`gpu-tenancy db purge`: delete, before a cutoff, the rows that only grow and that nothing
reads once they are old, as `nova-manage db purge --before` does for Nova.

- webhook deliveries delivered or given up (failed, dropped): a pending one is the outbox's
  work, and holds its lease's later notices back (engine/webhooks.py: due);
- bus notices sent (a pending one is still to send: engine/notifications.py);
- audit records;
- dashboard logins that expired (engine/web_sessions.py refuses them; each kept a login's
  tokens and its unread notices).

Nothing a figure, a quota, the planner or /metrics reads is touched: leases, their events,
allocations, spent allocations and GPU-use hours stay (the figures and usage are computed
from those; engine/housekeeping.py prunes the hourly GPU use itself).

Each batch is its own transaction, so that the API and the engine wait at most one batch for
the database (SQLite: its one write lock). Two purges at once (a timer on each of several hosts
sharing one database) share the work out: each counts the rows its own DELETEs removed, not the
keys it read, which the other may have deleted since (PostgreSQL reads without waiting).

The newest row of a table with a counted id is never deleted: SQLite gives a new row the
highest id there plus one, so deleting the newest would give its id again, and an id is what a
webhook receiver (X-GPU-Tenancy-Delivery), a bus consumer (message_id) and an audit reader
(marker) tell one row from another by."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, cast

from sqlalchemy import ColumnElement, and_, delete, func, or_, select
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive

DAY = 86400
# a cutoff less than this before now is refused: the outbox may still be retrying what was
# written since, and an audit trail wiped to the minute is a typo's work, not a retention policy
SHORTEST_AGE = DAY
BATCH = 500   # rows per transaction; also under SQLite's oldest limit of bound parameters (999)


@dataclass(frozen=True)
class Kind:
    """One table's purge: `old(cutoff)` holds for the rows all of whose times are before it."""
    name: str
    model: Any
    key: Any
    counted_id: bool   # an autoincrement id: its newest row is kept (above)
    old: Callable[[datetime], ColumnElement[bool]]


W, B, A, D = m.WebhookDelivery, m.BusNotice, m.AuditRecord, m.DashboardSession
KINDS = (
    # created, last tried and delivered before the cutoff
    Kind("webhook deliveries", W, W.id, True,
         lambda c: and_(W.status.in_(("delivered", "failed", "dropped")), W.created_at < c, W.next_attempt_at < c,
                        or_(W.delivered_at.is_(None), W.delivered_at < c))),
    Kind("bus notices", B, B.id, True,
         lambda c: and_(B.status == "sent", B.created_at < c, or_(B.sent_at.is_(None), B.sent_at < c))),
    Kind("audit records", A, A.id, True, lambda c: A.at < c),
    Kind("dashboard logins", D, D.id_hash, False, lambda c: D.expires_at < c),
)


def check_cutoff(before: int, now: int) -> None:
    """ValueError, in words, for a cutoff in the future or less than SHORTEST_AGE ago."""
    if before > now:
        raise ValueError("the cutoff is in the future: purge deletes only rows older than a past time")
    if now - before < SHORTEST_AGE:
        raise ValueError("the cutoff is less than a day ago: give one at least a day old "
                         "(--older-than-days 1 or more)")


def purge(sessions: sessionmaker[Session], before: int, batch: int = BATCH) -> dict[str, int]:
    """Delete each kind's rows older than `before` (epoch seconds), `batch` at a time; returns how
    many of each were deleted. The caller checks the cutoff (check_cutoff)."""
    cutoff = utcnow_naive(before)
    removed = {}
    for kind in KINDS:
        where = kind.old(cutoff)
        if kind.counted_id:
            with session_scope(sessions) as session:
                newest = session.scalar(select(func.max(kind.key)))
            if newest is None:
                removed[kind.name] = 0
                continue
            where = and_(where, kind.key < newest)
        removed[kind.name] = purge_kind(sessions, kind, where, batch)
    return removed


def purge_kind(sessions: sessionmaker[Session], kind: Kind, where: ColumnElement[bool], batch: int) -> int:
    count = 0
    while True:
        with session_scope(sessions) as session:
            keys = list(session.scalars(select(kind.key).where(where).order_by(kind.key).limit(batch)))
            if keys:
                done = session.execute(delete(kind.model).where(kind.key.in_(keys)))
                count += cast(CursorResult, done).rowcount
        if len(keys) < batch:
            return count


def vacuum(engine: Engine) -> str:
    """Give the space the purge freed back (`db purge --vacuum`); returns what was done, in words.

    SQLite keeps a deleted row's pages in its file, for its next rows, until VACUUM rewrites the
    file: the file shrinks, but the rewrite holds the write lock throughout (the API and the engine
    wait for it, 30 s at most, then fail) and needs free disk for a copy, hence opt-in. In WAL mode
    the rewrite goes through the WAL, which would stay the old file's size: it is truncated after.
    PostgreSQL: VACUUM (ANALYZE) of the purged tables, which stops neither reads nor writes, makes
    the deleted rows' space reusable and the planner's statistics current (autovacuum does both in
    its own time); the files do not shrink (VACUUM FULL would, locking each table: README)."""
    if engine.dialect.name == "sqlite":
        raw = engine.raw_connection()   # VACUUM cannot run in a transaction: make_engine begins each one
        try:
            cursor = raw.cursor()
            cursor.execute("VACUUM")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.close()
        finally:
            raw.close()
        return "vacuumed the file"
    tables = [kind.model.__tablename__ for kind in KINDS]
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in tables:
            conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")
    return f"vacuumed and analyzed {', '.join(tables)}"

"""What holds a migration run (migrations/env.py) safe: one run at a time, no migration left half
done, and a database a newer release upgraded refused in words, not a traceback."""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Iterator

from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, pool, text
from sqlalchemy.engine import Connection, Engine

LOG = logging.getLogger(__name__)
# the run's lock on PostgreSQL: two int4 keys, a space apart from session.key_lock's one int8 key
LOCK = text("SELECT pg_try_advisory_lock(1735290739, 1)")   # 1735290739: "gpu-tenancy" hashed, a constant
POLL = 1.0
# how long a run waits for another on SQLite (the busy timeout of its BEGIN IMMEDIATE), seconds
SQLITE_WAIT = 3600


class NewerSchema(Exception):
    """The database is at a revision these migrations do not know."""


def migration_engine(url: str) -> Engine:
    """PostgreSQL as it comes (its DDL is transactional). SQLite: pysqlite commits each DDL
    statement by itself, so a migration failing halfway kept its first half (a column added, the
    version not moved: the next run fails on it); here the driver leaves the transactions to
    SQLAlchemy and the run is one BEGIN IMMEDIATE transaction, all of it or nothing, which a run
    started meanwhile waits for. Not session.make_engine: its foreign keys on, the batch copy of a
    table (DROP TABLE leases) would delete every row that points at it."""
    if not url.startswith("sqlite"):
        return create_engine(url, poolclass=pool.NullPool)
    engine = create_engine(url, poolclass=pool.NullPool, connect_args={"timeout": SQLITE_WAIT})

    @event.listens_for(engine, "connect")
    def _sqlite_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    return engine


def transaction_per_migration(connection: Connection) -> bool:
    """PostgreSQL: each migration commits with its version, so that one failing later does not take
    back the version of one whose work stays (0022 and 0029 build their indexes outside any
    transaction). SQLite: one transaction for the run (migration_engine)."""
    return connection.dialect.name != "sqlite"


@contextlib.contextmanager
def one_at_a_time(connection: Connection) -> Iterator[None]:
    """Held for the whole run. PostgreSQL: a session advisory lock, freed when the connection closes
    (NullPool: really closed), tried and tried again rather than waited on, as a statement waiting
    holds a snapshot that CREATE INDEX CONCURRENTLY (0022, 0029) in the other run would wait for in
    turn. SQLite: the run's own transaction is the lock."""
    if connection.dialect.name == "postgresql":
        told = False
        while not connection.scalar(LOCK):
            connection.commit()
            if not told:
                LOG.warning("another schema upgrade of this database is running: waiting for it to end")
                told = True
            time.sleep(POLL)
        connection.commit()
    yield


def refuse_newer(script: ScriptDirectory, heads: tuple[str, ...]) -> None:
    known = {r.revision for r in script.walk_revisions()}
    for revision in heads:
        if revision not in known:
            raise NewerSchema(
                f"the database is at schema revision {revision}, which this gpu-tenancy does not know (its latest "
                f"is {script.get_current_head()}): a newer release upgraded it. Run that release or a later one "
                "against it; to go back to this one, restore the backup taken before that upgrade. "
                "Nothing was changed.")

"""Engine and session set-up, and the ledger lock."""
from __future__ import annotations

import contextlib
import functools
import math
import sqlite3
from datetime import datetime, timezone
from typing import Iterator, overload

from sqlalchemy import TextClause, create_engine, event, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy.db.models import Lock

LOCK_NAMES = ("ledger", "engine")
# the execution option a read transaction's connection carries (read_scope)
READ_ONLY = "gpu_tenancy_read_only"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record):
            # Take transaction control from pysqlite so that BEGIN IMMEDIATE below works.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
            sqlite_math(dbapi_conn)

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            # Every transaction that may write takes the write lock up front: SQLite
            # serialises writers anyway, and a deferred transaction that later writes can
            # fail with "database is locked" instead of waiting. A read (read_scope) takes
            # none: in WAL mode it reads a snapshot while writers go on, so a tenant's
            # costly read (a dry run's plan, a long listing) stops no one's write.
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")
        return engine
    return create_engine(url, pool_pre_ping=True)


def sqlite_math(dbapi_conn) -> None:
    """exp() as Python's, where this SQLite was built without its math functions (before 3.35,
    or without SQLITE_ENABLE_MATH_FUNCTIONS): fair share's usage is summed in SQL with it
    (engine/fairshare_usage.py). Where it was, SQLite's own is C's exp, as math.exp is."""
    try:
        dbapi_conn.execute("SELECT exp(0)").close()
    except sqlite3.OperationalError:
        dbapi_conn.create_function("exp", 1, math.exp, deterministic=True)


def make_sessionmaker(engine: Engine, bus_notifications: bool = False) -> sessionmaker[Session]:
    """`bus_notifications`: a lease change writes its message-bus notices (engine/notifications.py);
    the flag rides on each session, as the engine code that writes them has only the session."""
    return sessionmaker(engine, expire_on_commit=False, info={"bus_notifications": bus_notifications})


@contextlib.contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextlib.contextmanager
def read_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction that only reads: on SQLite it holds no write lock (a deferred BEGIN:
    one snapshot of the database, as of its first read); on PostgreSQL an ordinary one.
    Always rolled back: nothing done in it is kept. Closed without expiring what it loaded
    (a rollback would), so the rows read stay readable after it, as after session_scope."""
    session = factory()
    try:
        session.connection(execution_options={READ_ONLY: True})
        yield session
    finally:
        session.close()   # the connection's transaction rolled back, the objects detached as they are


def ensure_lock_rows(session: Session) -> None:
    have = set(session.scalars(select(Lock.name)))
    for name in LOCK_NAMES:
        if name not in have:
            session.add(Lock(name=name))
    session.flush()


def ledger_lock(session: Session) -> None:
    """Serialise allocation decisions: held until the session's transaction ends.
    PostgreSQL: a row lock; SQLite: the transaction already holds the database's
    write lock (BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(Lock).where(Lock.name == "ledger").with_for_update())
    elif not session.connection().get_execution_options().get(READ_ONLY):
        # (a read (read_scope) decides nothing and reads one snapshot: its UPDATE would take the
        # write lock halfway, and fail at once if another wrote since its first read)
        session.execute(text("UPDATE locks SET holder = holder WHERE name = 'ledger'"))


def key_lock(session: Session, *keys: str) -> None:
    """Serialise the transactions about one thing (each of `keys`, e.g. a volume) until this one
    ends, so that a check read after it sees what an earlier one committed; several keys are taken
    in the order given, in one statement. PostgreSQL: a transaction advisory lock on each key's
    64-bit hash (two keys of one hash only wait for each other); SQLite: the transaction already
    holds the database's write lock (BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(key_locks(len(keys)), {f"key{i}": key for i, key in enumerate(keys)})


@functools.cache
def key_locks(count: int) -> TextClause:
    # one column per key: PostgreSQL computes a select list left to right, so the order holds
    return text("SELECT " + ", ".join(f"pg_advisory_xact_lock(hashtextextended(:key{i}, 0))" for i in range(count)))


def utcnow_naive(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).replace(tzinfo=None)


@overload
def to_epoch(dt: datetime) -> int: ...
@overload
def to_epoch(dt: datetime | None) -> int | None: ...


def to_epoch(dt: datetime | None) -> int | None:
    if dt is None:
        return None
    return int(dt.replace(tzinfo=timezone.utc).timestamp())

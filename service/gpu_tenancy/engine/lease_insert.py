"""A new lease's row and its first events, written as INSERTs of their values (one statement
on PostgreSQL, two on SQLite) rather than through the session's unit of work: the same rows,
events and notices as adding them (engine/events.py: record_transition) and flushing, at half
the CPU (the flush of a lease and two events was about a fifth of a create: bench/api_load.py
--waiting). The row is then in the session as if it had been loaded, every column known, so
that nothing reads it again and its next changes (its arrival and queue place) are one UPDATE,
as before."""
from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import Insert, Table, bindparam, cast as sql_cast, insert, inspect, select, union_all, update
from sqlalchemy.orm import Session, make_transient_to_detached

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive
from gpu_tenancy.domain.states import LeaseState, transition
from gpu_tenancy.engine import notifications

LEASES, EVENTS = cast(Table, m.Lease.__table__), cast(Table, m.Event.__table__)
AUDIT, LOCKS = cast(Table, m.AuditRecord.__table__), cast(Table, m.Lock.__table__)
COLUMNS = list(LEASES.columns)
KEYS = {c.key for c in COLUMNS}   # the attributes' names too
# Core statements (the ORM's bulk insert would write the events in two, by their columns given)
INSERT_LEASE = insert(LEASES)   # compiled once per set of columns given
INSERT_EVENTS = insert(EVENTS).returning(EVENTS.c.id, sort_by_parameter_order=True)


def insert_new(session: Session, row: m.Lease, steps: list[tuple[LeaseState, str, str]], now: int) -> list[int]:
    """`row` (transient, its status None) written moved through `steps` (target, actor, why),
    each step's event written; the events' ids, in order. `row` is persistent after."""
    events: list[dict[str, Any]] = []
    for target, actor, why in steps:
        current = LeaseState(row.status) if row.status else None
        change = transition(row.id, current, target, at=now, actor=actor, reason=why)
        row.status, row.updated_at = target.value, utcnow_naive(now)
        # each notice as record_transition sends it: its payload is the row in that state, now
        # (a notice is flushed after the row's INSERT below)
        notifications.on_transition(session, row, change.from_state, target, now)
        events.append({"lease_id": row.id, "at": utcnow_naive(now), "actor": actor, "kind": "transition",
                       "from_state": change.from_state.value if change.from_state else None,
                       "to_state": target.value, "message": why})
    values = {c.key: value_of(row, c) for c in COLUMNS}
    # only the values given: None is the column's own (fewer parameters: psycopg parses a
    # statement of more than 50 again on every execution)
    given = {k: v for k, v in values.items() if v is not None}
    connection = session.connection()
    if connection.dialect.name == "postgresql":   # one statement, one round trip
        statement = insert_with_events(tuple(given), tuple(events[0]), len(events))   # each event of these keys
        parameters = {**{f"p_lease_{k}": v for k, v in given.items()},
                      **{f"p_event{i}_{k}": v for i, event in enumerate(events) for k, v in event.items()}}
        # the ids come from the sequence row by row, in the order of the SELECTs: ascending
        ids = sorted(connection.execute(statement, parameters).scalars())
    else:   # SQLite has no INSERT in a WITH
        connection.execute(INSERT_LEASE, given)
        ids = list(connection.execute(INSERT_EVENTS, events).scalars())
    for key, value in values.items():   # every column known (committed below): nothing is loaded again
        row.__dict__.setdefault(key, value)
    make_transient_to_detached(row)
    session.add(row)
    if session.new:   # the notices (bus notifications on), now: before a fit takes the ledger lock
        session.flush()
    return ids


def commit_fitted(session: Session, row: m.Lease, record: m.AuditRecord, recent: str | None) -> bool:
    """On PostgreSQL, the transaction of a fitted create committed here: the lease's changes (its
    arrival, network and queue place), its audit record (pending in `session`, which it leaves)
    and the ledger's last fits with it (`recent`: plan_insert.Recent) in one statement, UPDATEs
    in the WITH of the record's INSERT, sent with the COMMIT in one round trip (psycopg's
    pipeline). The ledger lock is held from the fit's claim to the commit, and the flush's two
    round trips and the commit's were most of that time (bench/api_load.py --waiting). The
    session then has nothing to write (its commit finds the transaction done); the row is
    detached, as written, and the record has no id (nothing reads it). False on SQLite (no
    UPDATE in a WITH): the session's commit writes them, as before."""
    assert inspect(record).pending, "the record is written here: one already flushed would be written twice"
    if session.get_bind().dialect.name != "postgresql":
        return False
    state = inspect(row)
    changed = {key: state.dict[key] for key in state.committed_state if key in KEYS}   # set, or flagged modified
    # both written below, so both leave the session: the row kept as it is now, for the answer
    # (marking its changes committed left it flagged dirty, and two flushes with nothing to write,
    # here and at the session's commit, were a twentieth of a create)
    session.expunge(row)
    session.expunge(record)
    session.flush()   # anything else made, first, in this transaction (the notices were, by insert_new)
    given = {k: v for k, v in ((c.key, value_of(record, c)) for c in AUDIT.columns) if v is not None}
    # named apart from every column: a parameter named as a column would be taken as its value
    parameters = {**{f"p_lease_{k}": v for k, v in changed.items()}, **{f"p_record_{k}": v for k, v in given.items()},
                  "p_lease": row.id, "p_recent": recent}
    connection = session.connection()
    statement = fitted_write(tuple(changed), tuple(given))
    if not pipelined(connection.dialect.driver):
        connection.execute(statement, parameters)   # and the session's commit, a round trip of its own
        return True
    driver = connection.connection.driver_connection
    assert driver is not None
    with driver.pipeline():   # the statement and the COMMIT sent together, one answer awaited
        connection.execute(statement, parameters)
        driver.commit()
    return True


@functools.cache
def pipelined(driver: str) -> bool:
    """Whether the driver can send statements without awaiting each answer: psycopg 3 on a
    libpq of version 14 or later (the binary package's is)."""
    if driver != "psycopg":
        return False
    import psycopg   # only with PostgreSQL (the postgres extra)
    return psycopg.Pipeline.is_supported()


@functools.cache
def insert_with_events(lease_columns: tuple[str, ...], event_columns: tuple[str, ...], n_events: int) -> Insert:
    """insert_new's statement on PostgreSQL for these columns and this many events, built once:
    the lease's INSERT in the WITH of its events' (their foreign key is checked at the end of the
    statement), the events' ids returned; parameters p_lease_<column> and p_event<i>_<key>. The
    events are a SELECT of each, not a multi-row VALUES, which SQLAlchemy compiles afresh on every
    execution (it is not cached): that cost more than the round trip saved."""
    lease = (insert(LEASES).values({k: bindparam(f"p_lease_{k}", type_=LEASES.c[k].type) for k in lease_columns})
             .cte("lease"))
    rows = union_all(*(select(*(sql_cast(bindparam(f"p_event{i}_{k}"), EVENTS.c[k].type).label(k)
                                for k in event_columns)) for i in range(n_events)))
    return insert(EVENTS).from_select(list(event_columns), rows).add_cte(lease).returning(EVENTS.c.id)


@functools.cache
def fitted_write(lease_columns: tuple[str, ...], record_columns: tuple[str, ...]) -> Insert:
    """commit_fitted's statement for these columns, built once (building it took as long as
    running it): parameters p_lease (its id), p_lease_<column>, p_record_<column> and p_recent."""
    lease = (update(LEASES).where(LEASES.c.id == bindparam("p_lease"))
             .values({k: bindparam(f"p_lease_{k}", type_=LEASES.c[k].type) for k in lease_columns}).cte("lease"))
    kept = update(LOCKS).where(LOCKS.c.name == "ledger").values(recent=bindparam("p_recent")).cte("kept")
    return (insert(AUDIT).values({k: bindparam(f"p_record_{k}", type_=AUDIT.c[k].type) for k in record_columns})
            .add_cte(lease).add_cte(kept).inline())


def value_of(row: Any, column: Any) -> Any:
    """The ORM object's value of `column`, or its default (a scalar or, like list, called)."""
    if column.key in row.__dict__:
        return row.__dict__[column.key]
    default = column.default
    if default is None:
        return None
    return default.arg({}) if default.is_callable else default.arg

"""A nullable JSON column stores Python None as SQL NULL, never as JSON null: SQLAlchemy's JSON
writes None as the JSON text 'null' unless the column says none_as_null, and a query that reads
the column as NULL then misses the row (a waiting lease's cleared planned_hosts did: the
create's fit took it for a lease placed on no hosts; migration 0028)."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, String, cast, create_engine, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m


def nullable_json_columns():
    for table in m.Base.metadata.sorted_tables:
        for column in table.columns:
            if isinstance(column.type, JSON) and column.nullable:
                yield table.name, column


def test_every_nullable_json_column_stores_none_as_null():
    found = list(nullable_json_columns())
    assert ("leases", "planned_hosts") in {(name, column.name) for name, column in found}   # the walk sees them
    wrong = [f"{name}.{column.name}" for name, column in found if not column.type.none_as_null]
    assert wrong == []


def test_none_written_to_a_servers_addresses_is_sql_null():
    """The rule as the database sees it, on the column it was last missing from."""
    engine = create_engine("sqlite://")
    m.Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(m.Server(lease_id="l", vm_index=0, host="h1", status="BUILD", addresses=None,
                             updated_at=datetime(2026, 12, 5, 8, 0, 0)))
        session.commit()
        stored = session.execute(select(cast(m.Server.addresses, String), m.Server.addresses.is_(None))).one()
    engine.dispose()
    assert tuple(stored) == (None, True)

"""The Alembic migrations make exactly the schema the models describe."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, select

from gpu_tenancy.db.models import Base, Lock


def test_migrated_schema_matches_the_models(db_url):
    engine = create_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        locks = set(conn.scalars(select(Lock.name)))
    engine.dispose()
    assert diff == []
    assert locks == {"ledger", "engine"}

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


def test_first_eta_migration_adds_a_nullable_column_and_goes_back(tmp_path):
    from alembic import command
    from sqlalchemy import inspect

    from gpu_tenancy.db import migrate
    url = f"sqlite:///{tmp_path / 'steps.db'}"
    migrate.upgrade(url, "0011_lease_network")
    engine = create_engine(url)
    assert "first_eta" not in {c["name"] for c in inspect(engine).get_columns("leases")}
    migrate.upgrade(url, "0012_first_eta")
    engine.dispose()
    column = {c["name"]: c for c in inspect(engine).get_columns("leases")}["first_eta"]
    assert column["nullable"]
    command.downgrade(migrate.alembic_config(url), "0011_lease_network")
    engine.dispose()
    assert "first_eta" not in {c["name"] for c in inspect(engine).get_columns("leases")}
    engine.dispose()

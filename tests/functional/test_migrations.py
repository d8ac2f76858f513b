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


def test_the_lease_ask_indexes_go_and_come_back_valid(db_url):
    """0022 builds its indexes CONCURRENTLY on PostgreSQL (no write to leases waits for the
    build), outside the migration's transaction, and drops them so too; plainly on SQLite."""
    from alembic import command
    from sqlalchemy import inspect, text

    from gpu_tenancy.db import migrate
    names = {"ix_leases_project_name", "ix_leases_project_status_user"}
    engine = create_engine(db_url)

    def indexes() -> set[str]:
        found = {i["name"] for i in inspect(engine).get_indexes("leases")} & names
        if engine.dialect.name == "postgresql":   # a failed concurrent build leaves an invalid index
            with engine.connect() as conn:
                assert conn.scalar(text("SELECT bool_and(indisvalid) FROM pg_index JOIN pg_class c "
                                        "ON c.oid = indexrelid WHERE relname LIKE 'ix_leases_project_%'")) in (True, None)
        engine.dispose()
        return found
    assert indexes() == names
    command.downgrade(migrate.alembic_config(db_url), "0021_park")
    assert indexes() == set()
    migrate.upgrade(db_url)
    assert indexes() == names

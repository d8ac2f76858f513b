"""Alembic environment: online migrations against the configured URL."""
from alembic import context

from gpu_tenancy.db import migration_run
from gpu_tenancy.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=target_metadata,
                          render_as_batch=True, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None   # db/migrate.py sets it
    engine = migration_run.migration_engine(url)
    with engine.connect() as connection, migration_run.one_at_a_time(connection):
        # render_as_batch: SQLite can only alter tables by copying them. transactional_ddl: SQLite's
        # too, as migration_engine makes it. One transaction per migration or one for the run:
        # migration_run.transaction_per_migration says which, and why
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                          transactional_ddl=True,
                          transaction_per_migration=migration_run.transaction_per_migration(connection))
        with context.begin_transaction():
            migration_run.refuse_newer(context.script, context.get_context().get_current_heads())
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()

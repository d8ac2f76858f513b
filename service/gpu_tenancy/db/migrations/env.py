"""Alembic environment: online migrations against the configured URL."""
from alembic import context
from sqlalchemy import create_engine, pool

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
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        # render_as_batch: SQLite can only alter tables by copying them. transaction_per_migration:
        # each migration commits with its version, so that one failing later in the same upgrade
        # does not take back the version of one whose work stays (0022 builds its indexes outside
        # any transaction on PostgreSQL)
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=True, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()

"""indexes for a new lease's checks (engine/ask_facts.py): a project's lease by name, and its
waiting leases (by status, then user), read by every create; each was a scan of all the
project's leases (5 ms of PostgreSQL per create with 10,000 waiting)

Revision ID: 0022_lease_ask_indexes
Revises: 0021_park
"""
from contextlib import nullcontext

from alembic import op

revision = '0022_lease_ask_indexes'
down_revision = '0021_park'
branch_labels = None
depends_on = None


INDEXES = (('ix_leases_project_name', ['project_id', 'name']),
           ('ix_leases_project_status_user', ['project_id', 'status', 'user_id']))


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # CONCURRENTLY, outside the migration's transaction: a plain CREATE INDEX blocks every
        # write to leases (every create and plan) while it reads the whole table
        with op.get_context().autocommit_block():
            for name, columns in INDEXES:
                # a build cancelled or failed before leaves its index, invalid, and the version
                # at 0021 (nothing to roll back): this run drops it and builds it again
                op.drop_index(name, table_name='leases', postgresql_concurrently=True, if_exists=True)
                op.create_index(name, 'leases', columns, postgresql_concurrently=True)
        return
    for name, columns in INDEXES:
        op.create_index(name, 'leases', columns)


def downgrade() -> None:
    concurrently = op.get_bind().dialect.name == 'postgresql'
    with op.get_context().autocommit_block() if concurrently else nullcontext():
        for name, _ in reversed(INDEXES):
            # IF EXISTS: a downgrade stopped halfway (outside any transaction) can be run again
            op.drop_index(name, table_name='leases', postgresql_concurrently=concurrently, if_exists=True)

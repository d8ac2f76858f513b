"""the index that finds a project's last started leases (engine/start_by_margins.py), built as
0022 builds its own: CONCURRENTLY on PostgreSQL, in a migration of its own, so that a build
stopped halfway is built again by the next upgrade

Revision ID: 0025_lease_start_index
Revises: 0024_start_by
"""
from contextlib import nullcontext

from alembic import op

revision = '0025_lease_start_index'
down_revision = '0024_start_by'
branch_labels = None
depends_on = None

NAME, COLUMNS = 'ix_leases_project_start', ['project_id', 'start_at']


def upgrade() -> None:
    concurrently = op.get_bind().dialect.name == 'postgresql'
    with op.get_context().autocommit_block() if concurrently else nullcontext():
        if concurrently:   # an invalid index left by a build stopped before: built again
            op.drop_index(NAME, table_name='leases', postgresql_concurrently=True, if_exists=True)
        op.create_index(NAME, 'leases', COLUMNS, postgresql_concurrently=concurrently)


def downgrade() -> None:
    concurrently = op.get_bind().dialect.name == 'postgresql'
    with op.get_context().autocommit_block() if concurrently else nullcontext():
        op.drop_index(NAME, table_name='leases', postgresql_concurrently=concurrently, if_exists=True)

"""indexes for two reads that read every lease ever made: a project's listing after a marker
(GET /v1/leases?marker=: api/lease_view.py, after) had (project_id, created_at) without the id
that breaks its ties, so SQLite sorted the rest of the project's leases for each page (a temporary
B-tree); with (project_id, created_at, id) a page is a range of the index, from the marker.
It takes the place of ix_leases_project_created (0001), a prefix of it. And the leases reclaimed
for a lease (engine/early_ends.py: yielded_pairs, each engine pass) had no index at all: the
pass read the whole table; ix_leases_early_end_for holds only the leases ended early for another.

Revision ID: 0032_history_read_indexes
Revises: 0031_leases_created_index
"""
from contextlib import nullcontext

import sqlalchemy as sa
from alembic import op

revision = '0032_history_read_indexes'
down_revision = '0031_leases_created_index'
branch_labels = None
depends_on = None

PROJECT, OLD_PROJECT = 'ix_leases_project_created_id', 'ix_leases_project_created'
EARLY_FOR = 'ix_leases_early_end_for'
EARLY_FOR_WHERE = sa.text('early_end_for IS NOT NULL')   # models.py: the few ended early for another


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # CONCURRENTLY, outside the migration's transaction (as 0022, 0031): creates and plans go on
        # meanwhile. A build cancelled or failed before leaves its index invalid and the version at
        # 0031: this run drops it and builds it again. The old index goes once the new one is built
        with op.get_context().autocommit_block():
            op.drop_index(PROJECT, table_name='leases', postgresql_concurrently=True, if_exists=True)
            op.create_index(PROJECT, 'leases', ['project_id', 'created_at', 'id'], postgresql_concurrently=True)
            op.drop_index(EARLY_FOR, table_name='leases', postgresql_concurrently=True, if_exists=True)
            op.create_index(EARLY_FOR, 'leases', ['early_end_for'], postgresql_concurrently=True,
                            postgresql_where=EARLY_FOR_WHERE)
            op.drop_index(OLD_PROJECT, table_name='leases', postgresql_concurrently=True, if_exists=True)
        return
    op.create_index(PROJECT, 'leases', ['project_id', 'created_at', 'id'])
    op.create_index(EARLY_FOR, 'leases', ['early_end_for'], sqlite_where=EARLY_FOR_WHERE)
    op.drop_index(OLD_PROJECT, table_name='leases')


def downgrade() -> None:
    concurrently = op.get_bind().dialect.name == 'postgresql'
    with op.get_context().autocommit_block() if concurrently else nullcontext():
        # IF EXISTS: a downgrade stopped halfway (outside any transaction) can be run again
        op.drop_index(OLD_PROJECT, table_name='leases', postgresql_concurrently=concurrently, if_exists=True)
        op.create_index(OLD_PROJECT, 'leases', ['project_id', 'created_at'], postgresql_concurrently=concurrently)
        op.drop_index(EARLY_FOR, table_name='leases', postgresql_concurrently=concurrently, if_exists=True)
        op.drop_index(PROJECT, table_name='leases', postgresql_concurrently=concurrently, if_exists=True)

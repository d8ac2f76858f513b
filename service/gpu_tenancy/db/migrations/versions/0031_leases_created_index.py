"""every project's leases in the order they were made (GET /v1/leases?all_projects=true, oldest or
newest first: each admin page of the dashboard asks for its first lease, the admin calendar for
the newest): no index had created_at first, so each such page read and sorted every lease ever
made (a sequential scan and a sort of the whole table on PostgreSQL, 65 ms at 200,000 leases; a
scan and a temporary B-tree on SQLite). With (created_at, id), the listing's own order, a page
reads its rows off the index, and the page's allocations, servers and failures are found by
its bounds in it (api/lease_view.py: IN_ANY_PROJECT).

Revision ID: 0031_leases_created_index
Revises: 0030_lease_asked_start
"""
from alembic import op

revision = '0031_leases_created_index'
down_revision = '0030_lease_asked_start'
branch_labels = None
depends_on = None

NAME = 'ix_leases_created'


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # CONCURRENTLY, outside the migration's transaction (as 0022): creates and plans go on
        # meanwhile. A build cancelled or failed before leaves its index invalid and the version at
        # 0030: this run drops it and builds it again
        with op.get_context().autocommit_block():
            op.drop_index(NAME, table_name='leases', postgresql_concurrently=True, if_exists=True)
            op.create_index(NAME, 'leases', ['created_at', 'id'], postgresql_concurrently=True)
        return
    op.create_index(NAME, 'leases', ['created_at', 'id'])


def downgrade() -> None:
    op.drop_index(NAME, table_name='leases')

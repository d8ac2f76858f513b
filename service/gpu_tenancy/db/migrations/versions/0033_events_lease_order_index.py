"""a lease's events in the order its pages list them (GET /v1/leases/{id}/events, either order):
events had (lease_id) alone, so PostgreSQL read every event of the lease and sorted them for a
page at the end of a long history (0.4-0.5 s at 200,000 events), and for the newest page it
walked the primary key backwards through every other lease's newer events (0.8 s with 1.8 million
of them). With (lease_id, id) a page is a range of the index, from its marker's event
(api/event_markers.py). It takes the place of ix_events_lease_id (0001), a prefix of it.

Revision ID: 0033_events_lease_order_index
Revises: 0032_history_read_indexes
"""
from contextlib import nullcontext

from alembic import op

revision = '0033_events_lease_order_index'
down_revision = '0032_history_read_indexes'
branch_labels = None
depends_on = None

NAME, OLD = 'ix_events_lease_id_id', 'ix_events_lease_id'


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # CONCURRENTLY, outside the migration's transaction (as 0022, 0031, 0032): events go on being
        # written meanwhile. A build cancelled or failed before leaves its index invalid and the
        # version at 0032: this run drops it and builds it again. The old index goes once the new
        # one is built (a lease's delete finds its events by either)
        with op.get_context().autocommit_block():
            op.drop_index(NAME, table_name='events', postgresql_concurrently=True, if_exists=True)
            op.create_index(NAME, 'events', ['lease_id', 'id'], postgresql_concurrently=True)
            op.drop_index(OLD, table_name='events', postgresql_concurrently=True, if_exists=True)
        return
    op.create_index(NAME, 'events', ['lease_id', 'id'])
    op.drop_index(OLD, table_name='events')


def downgrade() -> None:
    concurrently = op.get_bind().dialect.name == 'postgresql'
    with op.get_context().autocommit_block() if concurrently else nullcontext():
        # IF EXISTS: a downgrade stopped halfway (outside any transaction) can be run again
        op.drop_index(OLD, table_name='events', postgresql_concurrently=concurrently, if_exists=True)
        op.create_index(OLD, 'events', ['lease_id'], postgresql_concurrently=concurrently)
        op.drop_index(NAME, table_name='events', postgresql_concurrently=concurrently, if_exists=True)

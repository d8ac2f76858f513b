"""the engine's list of cancelled or expired leases whose own flavor is still in the cloud
(engine/lease_flavor.py: remove_unstarted), read every pass: a partial index, empty but for
those few, so that the read does not grow with the leases ever cancelled

Revision ID: 0025_flavor_leftovers
Revises: 0024_start_by
"""
from alembic import op
import sqlalchemy as sa

revision = '0025_flavor_leftovers'
down_revision = '0024_start_by'
branch_labels = None
depends_on = None

WHERE = sa.text("flavor_id IS NOT NULL AND status IN ('cancelled', 'expired')")


def upgrade() -> None:
    # a few rows at most: no CONCURRENTLY needed (the build reads the table once, briefly)
    op.create_index('ix_leases_flavor_leftovers', 'leases', ['id', 'project_id'],
                    postgresql_where=WHERE, sqlite_where=WHERE)


def downgrade() -> None:
    op.drop_index('ix_leases_flavor_leftovers', table_name='leases')

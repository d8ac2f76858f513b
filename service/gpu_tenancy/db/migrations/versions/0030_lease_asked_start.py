"""the start a lease asked for, kept: a re-placement (a failed boot, a host gone down, a VM lost
off the shelf) plans the lease again from a new earliest start and writes it over
earliest_start, and the wait figures (/metrics, the admin figures) then read a lease that had
waited two hours as one that waited none. Leases made before keep NULL, read as earliest_start.

Revision ID: 0030_lease_asked_start
Revises: 0029_lease_names_unique
"""
import sqlalchemy as sa
from alembic import op

revision = '0030_lease_asked_start'
down_revision = '0029_lease_names_unique'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('leases', sa.Column('asked_start', sa.DateTime(), nullable=True))


def downgrade() -> None:
    op.drop_column('leases', 'asked_start')

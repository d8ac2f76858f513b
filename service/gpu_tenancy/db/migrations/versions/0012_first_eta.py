"""a lease's first ETA: the start it was promised when it was created and had to wait

Revision ID: 0012_first_eta
Revises: 0011_lease_network
"""
from alembic import op
import sqlalchemy as sa


revision = '0012_first_eta'
down_revision = '0011_lease_network'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('first_eta', sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('first_eta')

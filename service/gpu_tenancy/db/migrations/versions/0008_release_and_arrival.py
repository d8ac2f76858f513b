"""release times (the release allowance) and the lease arrival sequence

Revision ID: 0008_release_and_arrival
Revises: 0007_spent_allocations
"""
from alembic import op
import sqlalchemy as sa


revision = '0008_release_and_arrival'
down_revision = '0007_spent_allocations'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('release_times',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('seconds', sa.Integer(), nullable=False),
    sa.CheckConstraint('seconds >= 0', name='ck_release_times_seconds'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('arrival', sa.BigInteger(), nullable=True))
    # leases asked before: in the order of their first event
    op.execute("UPDATE leases SET arrival = (SELECT MIN(events.id) FROM events WHERE events.lease_id = leases.id)")


def downgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('arrival')
    op.drop_table('release_times')

"""a lease parked by an idle rule: when it parked, its held resume slot's start, the time it had left

Revision ID: 0021_park
Revises: 0020_metric_rollups
"""
from alembic import op
import sqlalchemy as sa

revision = '0021_park'
down_revision = '0020_metric_rollups'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('parked_at', sa.DateTime(timezone=False), nullable=True))
        batch_op.add_column(sa.Column('resume_by', sa.DateTime(timezone=False), nullable=True))
        batch_op.add_column(sa.Column('remaining', sa.Integer(), nullable=True))
    # a parked lease's VMs are SHELVED_OFFLOADED: 17 characters (PostgreSQL refuses it in 16)
    with op.batch_alter_table('servers', schema=None) as batch_op:
        batch_op.alter_column('status', existing_type=sa.String(16), type_=sa.String(32),
                              existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('servers', schema=None) as batch_op:
        batch_op.alter_column('status', existing_type=sa.String(32), type_=sa.String(16),
                              existing_nullable=False)
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('remaining')
        batch_op.drop_column('resume_by')
        batch_op.drop_column('parked_at')

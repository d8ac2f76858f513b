"""a waiting lease that goes by its first ETA (the planner's keep_etas): a plan once broke it

Revision ID: 0017_eta_guarded
Revises: 0016_gpu_activity
"""
from alembic import op
import sqlalchemy as sa


revision = '0017_eta_guarded'
down_revision = '0016_gpu_activity'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('eta_guarded', sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.alter_column('eta_guarded', server_default=None)


def downgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('eta_guarded')

"""incremental create: a waiting lease's planned hosts, and the order leases were fitted into the plan

Revision ID: 0015_plan_insert
Revises: 0014_whatif_jobs
"""
from alembic import op
import sqlalchemy as sa


revision = '0015_plan_insert'
down_revision = '0014_whatif_jobs'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('planned_hosts', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('plan_seq', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_leases_plan_seq'), ['plan_seq'], unique=False)
    with op.batch_alter_table('locks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('inserted', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('locks', schema=None) as batch_op:
        batch_op.drop_column('inserted')
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_leases_plan_seq'))
        batch_op.drop_column('plan_seq')
        batch_op.drop_column('planned_hosts')

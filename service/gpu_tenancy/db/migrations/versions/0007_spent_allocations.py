"""spent allocations: the used part of a lease's hold on a host that went down

Revision ID: 0007_spent_allocations
Revises: 0006_dashboard_sessions
"""
from alembic import op
import sqlalchemy as sa


revision = '0007_spent_allocations'
down_revision = '0006_dashboard_sessions'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('spent_allocations',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('gpu_model', sa.String(length=64), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('start_at', sa.DateTime(), nullable=False),
    sa.Column('end_at', sa.DateTime(), nullable=False),
    sa.CheckConstraint('gpus > 0 AND end_at > start_at', name='ck_spent_allocations_window'),
    sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('spent_allocations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_spent_allocations_lease_id'), ['lease_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_spent_allocations_project_id'), ['project_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_spent_allocations_end_at'), ['end_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('spent_allocations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_spent_allocations_end_at'))
        batch_op.drop_index(batch_op.f('ix_spent_allocations_project_id'))
        batch_op.drop_index(batch_op.f('ix_spent_allocations_lease_id'))
    op.drop_table('spent_allocations')

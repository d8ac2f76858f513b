"""GPU activity: the guest agent's last utilisation report per lease, and measured and used GPU-seconds per lease and hour

Revision ID: 0016_gpu_activity
Revises: 0015_plan_insert
"""
from alembic import op
import sqlalchemy as sa


revision = '0016_gpu_activity'
down_revision = '0015_plan_insert'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'lease_activity',
        sa.Column('lease_id', sa.String(length=36), nullable=False),
        sa.Column('first_report_at', sa.DateTime(timezone=False), nullable=False),
        sa.Column('last_report_at', sa.DateTime(timezone=False), nullable=False),
        sa.Column('busy_at', sa.DateTime(timezone=False), nullable=True),
        sa.Column('idle_warned_at', sa.DateTime(timezone=False), nullable=True),
        sa.Column('reported', sa.JSON(), nullable=False),
        sa.Column('latest', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('lease_id'),
    )
    op.create_table(
        'gpu_use_hours',
        sa.Column('lease_id', sa.String(length=36), nullable=False),
        sa.Column('hour', sa.DateTime(timezone=False), nullable=False),
        sa.Column('project_id', sa.String(length=64), nullable=False),
        sa.Column('gpu_model', sa.String(length=64), nullable=False),
        sa.Column('measured_gpu_seconds', sa.Float(), nullable=False),
        sa.Column('used_gpu_seconds', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('lease_id', 'hour'),
    )
    with op.batch_alter_table('gpu_use_hours', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_gpu_use_hours_hour'), ['hour'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('gpu_use_hours', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_gpu_use_hours_hour'))
    op.drop_table('gpu_use_hours')
    op.drop_table('lease_activity')

"""releasing GPUs: the VMs of a re-placed lease the cloud has not released yet

Revision ID: 0009_releasing_gpus
Revises: 0008_release_and_arrival
"""
from alembic import op
import sqlalchemy as sa


revision = '0009_releasing_gpus'
down_revision = '0008_release_and_arrival'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('releasing_gpus',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('vm_index', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('gpu_model', sa.String(length=64), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('cloud_id', sa.String(length=64), nullable=False),
    sa.Column('since', sa.DateTime(), nullable=False),
    sa.CheckConstraint('gpus > 0', name='ck_releasing_gpus_gpus'),
    sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('releasing_gpus', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_releasing_gpus_lease_id'), ['lease_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_releasing_gpus_host'), ['host'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('releasing_gpus', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_releasing_gpus_host'))
        batch_op.drop_index(batch_op.f('ix_releasing_gpus_lease_id'))
    op.drop_table('releasing_gpus')

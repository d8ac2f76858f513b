"""lease failure history

Revision ID: 0003_resilience
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = '0003_resilience'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('lease_failures',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('at', sa.DateTime(timezone=False), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('failure_class', sa.String(length=32), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('hosts', sa.JSON(), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('retry_at', sa.DateTime(timezone=False), nullable=True),
    sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_lease_failures_lease_id', 'lease_failures', ['lease_id'])
    op.create_index('ix_lease_failures_failure_class', 'lease_failures', ['failure_class'])


def downgrade() -> None:
    op.drop_index('ix_lease_failures_failure_class', table_name='lease_failures')
    op.drop_index('ix_lease_failures_lease_id', table_name='lease_failures')
    op.drop_table('lease_failures')

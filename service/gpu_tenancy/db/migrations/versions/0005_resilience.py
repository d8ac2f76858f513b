"""lease failure history, project webhooks and their delivery outbox

Revision ID: 0005_resilience
Revises: 0004_readiness
"""
from alembic import op
import sqlalchemy as sa


revision = '0005_resilience'
down_revision = '0004_readiness'
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
    op.create_table('project_webhooks',
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('url', sa.String(length=2048), nullable=False),
    sa.Column('secret', sa.String(length=256), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=False), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=False), nullable=False),
    sa.PrimaryKeyConstraint('project_id')
    )
    op.create_table('webhook_deliveries',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('event', sa.String(length=64), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=False), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=False), nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=False), nullable=True),
    sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    for column in ('project_id', 'lease_id', 'status'):
        op.create_index(f'ix_webhook_deliveries_{column}', 'webhook_deliveries', [column])


def downgrade() -> None:
    for column in ('project_id', 'lease_id', 'status'):
        op.drop_index(f'ix_webhook_deliveries_{column}', table_name='webhook_deliveries')
    op.drop_table('webhook_deliveries')
    op.drop_table('project_webhooks')
    op.drop_index('ix_lease_failures_failure_class', table_name='lease_failures')
    op.drop_index('ix_lease_failures_lease_id', table_name='lease_failures')
    op.drop_table('lease_failures')

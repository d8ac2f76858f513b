"""the message-bus outbox: lease notifications written with the change they tell of, sent after

Revision ID: 0018_bus_notices
Revises: 0017_eta_guarded
"""
from alembic import op
import sqlalchemy as sa


revision = '0018_bus_notices'
down_revision = '0017_eta_guarded'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('bus_notices',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('event_type', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=False), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=False), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=False), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    for column in ('lease_id', 'status'):
        op.create_index(f'ix_bus_notices_{column}', 'bus_notices', [column])


def downgrade() -> None:
    for column in ('lease_id', 'status'):
        op.drop_index(f'ix_bus_notices_{column}', table_name='bus_notices')
    op.drop_table('bus_notices')

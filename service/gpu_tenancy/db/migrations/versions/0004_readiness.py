"""GPU readiness probe: a lease's opt-in and secret, each server's last report

Revision ID: 0004_readiness
Revises: 0003_sharing
"""
from alembic import op
import sqlalchemy as sa


revision = '0004_readiness'
down_revision = '0003_sharing'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases') as batch:
        batch.add_column(sa.Column('readiness_probe', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column('readiness_token', sa.String(length=64), nullable=True))
    with op.batch_alter_table('servers') as batch:
        batch.add_column(sa.Column('readiness', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('readiness_detail', sa.Text(), nullable=True))
        batch.add_column(sa.Column('readiness_at', sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('servers') as batch:
        batch.drop_column('readiness_at')
        batch.drop_column('readiness_detail')
        batch.drop_column('readiness')
    with op.batch_alter_table('leases') as batch:
        batch.drop_column('readiness_token')
        batch.drop_column('readiness_probe')

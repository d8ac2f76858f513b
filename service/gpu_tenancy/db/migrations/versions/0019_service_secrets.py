"""secrets the service makes once and every process shares (the offers' signing key when
the operator configured none)

Revision ID: 0019_service_secrets
Revises: 0018_bus_notices
"""
from alembic import op
import sqlalchemy as sa


revision = '0019_service_secrets'
down_revision = '0018_bus_notices'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('service_secrets',
                    sa.Column('name', sa.String(length=32), nullable=False),
                    sa.Column('value', sa.String(length=128), nullable=False),
                    sa.PrimaryKeyConstraint('name'))


def downgrade() -> None:
    op.drop_table('service_secrets')

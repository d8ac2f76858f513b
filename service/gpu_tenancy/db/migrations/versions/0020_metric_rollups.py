"""/metrics' all-time counters kept as running totals up to a watermark (engine/metric_rollups.py)

Revision ID: 0020_metric_rollups
Revises: 0019_service_secrets
"""
from alembic import op
import sqlalchemy as sa


revision = '0020_metric_rollups'
down_revision = '0019_service_secrets'
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table('metric_rollups',
                            sa.Column('name', sa.String(length=32), nullable=False),
                            sa.Column('project_id', sa.String(length=64), nullable=False),
                            sa.Column('gpu_model', sa.String(length=64), nullable=False),
                            sa.Column('value', sa.Float(), nullable=False),
                            sa.PrimaryKeyConstraint('name', 'project_id', 'gpu_model'))
    # the watermark: nothing folded yet (a scrape reads everything since the epoch)
    op.bulk_insert(table, [{'name': 'through', 'project_id': '', 'gpu_model': '', 'value': 0.0}])


def downgrade() -> None:
    op.drop_table('metric_rollups')

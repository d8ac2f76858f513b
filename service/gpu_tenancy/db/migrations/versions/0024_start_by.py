"""start-by (engine/start_by_margins.py): each lease's first start-by, when it was told it, and
its margin ratio; the samples of lateness at the first start; each project's margin ratio

Revision ID: 0024_start_by
Revises: 0023_ledger_recent_fits
"""
from alembic import op
import sqlalchemy as sa


revision = '0024_start_by'
down_revision = '0023_ledger_recent_fits'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('first_start_by', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('eta_told_at', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('start_by_ratio', sa.Float(), nullable=True))
    op.create_table(
        'start_by_samples',
        sa.Column('lease_id', sa.String(length=36), nullable=False),
        sa.Column('project_id', sa.String(length=64), nullable=False),
        sa.Column('started_at', sa.DateTime(), nullable=False),
        sa.Column('ratio', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('lease_id'))
    op.create_index('ix_start_by_samples_project_id', 'start_by_samples', ['project_id'], unique=False)
    op.create_table(
        'start_by_margins',
        sa.Column('project_id', sa.String(length=64), nullable=False),
        sa.Column('ratio', sa.Float(), nullable=False),
        sa.Column('samples', sa.Integer(), nullable=False),
        sa.Column('computed_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('project_id'))


def downgrade() -> None:
    op.drop_table('start_by_margins')
    op.drop_index('ix_start_by_samples_project_id', table_name='start_by_samples')
    op.drop_table('start_by_samples')
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('start_by_ratio')
        batch_op.drop_column('eta_told_at')
        batch_op.drop_column('first_start_by')

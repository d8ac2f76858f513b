"""policy what-if jobs: an admin's replay of the history under proposed settings

Revision ID: 0014_whatif_jobs
Revises: 0013_ledger_generation
"""
from alembic import op
import sqlalchemy as sa


revision = '0014_whatif_jobs'
down_revision = '0013_ledger_generation'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('whatif_jobs',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('running', sa.String(length=8), nullable=True),
    sa.Column('days', sa.Float(), nullable=False),
    sa.Column('changes', sa.JSON(), nullable=False),
    sa.Column('leases', sa.Integer(), nullable=False),
    sa.Column('progress', sa.Float(), nullable=False),
    sa.Column('result', sa.JSON(none_as_null=True), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_by', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('running')
    )
    with op.batch_alter_table('whatif_jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_whatif_jobs_created_at'), ['created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('whatif_jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_whatif_jobs_created_at'))
    op.drop_table('whatif_jobs')

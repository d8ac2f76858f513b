"""the ledger's generation: bumped by every replan, so a reader can tell whether the plan may have moved

Revision ID: 0013_ledger_generation
Revises: 0012_first_eta
"""
from alembic import op
import sqlalchemy as sa


revision = '0013_ledger_generation'
down_revision = '0012_first_eta'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('locks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('generation', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('locks', schema=None) as batch_op:
        batch_op.drop_column('generation')

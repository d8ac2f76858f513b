"""the ledger's last fits (engine/plan_insert.py: Recent), kept in its lock row: a create's claim
of the lock reads the fits committed while it waited in the same statement

Revision ID: 0023_ledger_recent_fits
Revises: 0022_lease_ask_indexes
"""
from alembic import op
import sqlalchemy as sa


revision = '0023_ledger_recent_fits'
down_revision = '0022_lease_ask_indexes'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('locks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('recent', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('locks', schema=None) as batch_op:
        batch_op.drop_column('recent')

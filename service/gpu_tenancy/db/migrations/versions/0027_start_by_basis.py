"""what each project's start-by margin was learnt from (its own leases, everyone's, or its load
class's: domain/start_by.py, MarginBasis) and its load class then, and what a waiting lease's was
(leases.start_by_basis), told beside its start-by; NULL where computed or written before (the
engine computes the margins again within a minute, and writes a lease's at its next change).
Upgrade the engine with the API: an engine of the code before writes ratios without their basis,
so a lease's basis could speak of a ratio it no longer has.

Revision ID: 0027_start_by_basis
Revises: 0026_start_by_load_class
"""
from alembic import op
import sqlalchemy as sa

revision = '0027_start_by_basis'
down_revision = '0026_start_by_load_class'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('start_by_margins') as batch:
        batch.add_column(sa.Column('source', sa.String(16), nullable=True))
        batch.add_column(sa.Column('load_class', sa.Integer(), nullable=True))
    with op.batch_alter_table('leases') as batch:
        batch.add_column(sa.Column('start_by_basis', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('leases') as batch:
        batch.drop_column('start_by_basis')
    with op.batch_alter_table('start_by_margins') as batch:
        batch.drop_column('load_class')
        batch.drop_column('source')

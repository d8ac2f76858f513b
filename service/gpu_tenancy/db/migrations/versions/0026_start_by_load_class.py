"""each start-by sample's load class: how far its project's GPUs held were above its fair part
when the lease started (domain/start_by.py: load_class); NULL for the samples recorded before

Revision ID: 0026_start_by_load_class
Revises: 0025_flavor_leftovers
"""
from alembic import op
import sqlalchemy as sa

revision = '0026_start_by_load_class'
down_revision = '0025_flavor_leftovers'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('start_by_samples') as batch:
        batch.add_column(sa.Column('load_class', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('start_by_samples') as batch:
        batch.drop_column('load_class')

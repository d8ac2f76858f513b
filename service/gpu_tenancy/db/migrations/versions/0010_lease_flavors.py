"""lease flavors: who boots a lease's VMs, and the lease's own flavor (issue 17)

The per-project flavors of the first wave are not touched here (they are in the
cloud, not in the database): the engine's reconcile removes every one it finds.

Revision ID: 0010_lease_flavors
Revises: 0009_releasing_gpus
"""
from alembic import op
import sqlalchemy as sa


revision = '0010_lease_flavors'
down_revision = '0009_releasing_gpus'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('boot', sa.String(length=16), nullable=False, server_default='service'))
        batch_op.add_column(sa.Column('flavor_id', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('flavor_name', sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('flavor_name')
        batch_op.drop_column('flavor_id')
        batch_op.drop_column('boot')

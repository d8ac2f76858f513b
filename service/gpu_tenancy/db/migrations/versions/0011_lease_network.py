"""a lease's network, floating IPs and login user; a server's addresses

Revision ID: 0011_lease_network
Revises: 0010_lease_flavors
"""
from alembic import op
import sqlalchemy as sa


revision = '0011_lease_network'
down_revision = '0010_lease_flavors'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('network_via', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('network_id', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('network_name', sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column('floating_ip', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column('ssh_user', sa.String(length=64), nullable=True))
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.alter_column('floating_ip', server_default=None)
    with op.batch_alter_table('servers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('addresses', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('servers', schema=None) as batch_op:
        batch_op.drop_column('addresses')
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('ssh_user')
        batch_op.drop_column('floating_ip')
        batch_op.drop_column('network_name')
        batch_op.drop_column('network_id')
        batch_op.drop_column('network_via')

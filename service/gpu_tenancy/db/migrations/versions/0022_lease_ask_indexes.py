"""indexes for a new lease's checks (engine/ask_facts.py): a project's lease by name, and its
waiting leases (by status, then user), read by every create; each was a scan of all the
project's leases (5 ms of PostgreSQL per create with 10,000 waiting)

Revision ID: 0022_lease_ask_indexes
Revises: 0021_park
"""
from alembic import op

revision = '0022_lease_ask_indexes'
down_revision = '0021_park'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_leases_project_name', 'leases', ['project_id', 'name'])
    op.create_index('ix_leases_project_status_user', 'leases', ['project_id', 'status', 'user_id'])


def downgrade() -> None:
    op.drop_index('ix_leases_project_status_user', table_name='leases')
    op.drop_index('ix_leases_project_name', table_name='leases')

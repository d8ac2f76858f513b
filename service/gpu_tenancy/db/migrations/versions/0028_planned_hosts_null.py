"""a waiting lease's planned hosts, once cleared, are SQL NULL rather than JSON null: the column
was written as JSON null, which the create's fit took for a lease placed on no hosts, so a lease
a reclaim was announced for (its start known, its hosts not) let a new lease be fitted onto the
GPUs its plan had given it (engine/plan_insert.py, build). The model now writes NULL; this turns
the rows written before into NULL too.

Revision ID: 0028_planned_hosts_null
Revises: 0027_start_by_basis
"""
from alembic import op

revision = '0028_planned_hosts_null'
down_revision = '0027_start_by_basis'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE leases SET planned_hosts = NULL WHERE CAST(planned_hosts AS TEXT) = 'null'")


def downgrade() -> None:
    pass   # NULL is what the code before reads as no hosts too

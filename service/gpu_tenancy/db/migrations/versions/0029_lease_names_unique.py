"""one unfinished lease of a name in a project, held by the database: a unique index on
(project_id, name) over the leases not finished. The create's check (engine/leases.py:
check_name_free) let two requests with one name pass when they ran at once, and both leases
were made. Unfinished leases that already share a name keep it on the first made (by
created_at, then id); each other one is renamed to its id, and an event on it says so.

Revision ID: 0029_lease_names_unique
Revises: 0028_planned_hosts_null
"""
from collections import defaultdict
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = '0029_lease_names_unique'
down_revision = '0028_planned_hosts_null'
branch_labels = None
depends_on = None

NAME = 'uq_leases_project_name_unfinished'
FINISHED = "('cancelled', 'ended', 'expired', 'failed', 'preempted')"
UNFINISHED = sa.text(f"status NOT IN {FINISHED}")
LEASES = sa.table('leases', sa.column('id', sa.String), sa.column('name', sa.String))
EVENTS = sa.table('events', sa.column('lease_id', sa.String), sa.column('at', sa.DateTime),
                  sa.column('actor', sa.String), sa.column('kind', sa.String), sa.column('message', sa.Text))


def rename_duplicates() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.text(
        f"SELECT id, project_id, name FROM leases WHERE status NOT IN {FINISHED} "
        "ORDER BY project_id, name, created_at, id")).all()
    named: dict[tuple[str, str], list[str]] = defaultdict(list)
    for lease_id, project_id, name in rows:
        named[(project_id, name)].append(lease_id)
    now = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    for (_, name), ids in named.items():
        for lease_id in ids[1:]:   # the first made keeps the name
            bind.execute(LEASES.update().where(LEASES.c.id == lease_id).values(name=lease_id))
            bind.execute(EVENTS.insert().values(
                lease_id=lease_id, at=now, actor='migration', kind='renamed',
                message=f"renamed from '{name}' to its id: lease {ids[0]} of the project, not finished, was made "
                        "first with that name, and a name now finds one such lease"))


def upgrade() -> None:
    rename_duplicates()
    if op.get_bind().dialect.name == 'postgresql':
        # CONCURRENTLY, outside the migration's transaction (as 0022): creates go on meanwhile. One
        # that makes a duplicate before the index is built fails the build, which leaves the index
        # invalid and the version at 0028: running the upgrade again renames it and builds again.
        with op.get_context().autocommit_block():
            op.drop_index(NAME, table_name='leases', postgresql_concurrently=True, if_exists=True)
            op.create_index(NAME, 'leases', ['project_id', 'name'], unique=True,
                            postgresql_where=UNFINISHED, postgresql_concurrently=True)
        return
    op.create_index(NAME, 'leases', ['project_id', 'name'], unique=True, sqlite_where=UNFINISHED)


def downgrade() -> None:
    op.drop_index(NAME, table_name='leases')

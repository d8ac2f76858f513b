"""The Alembic migrations make exactly the schema the models describe."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, select

from gpu_tenancy.db.models import Base, Lock


def test_migrated_schema_matches_the_models(db_url):
    engine = create_engine(db_url)
    with engine.connect() as conn:
        # server defaults too: autogenerate leaves them out unless asked
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_server_default": True}),
                                Base.metadata)
        locks = set(conn.scalars(select(Lock.name)))
    engine.dispose()
    assert diff == []
    assert locks == {"ledger", "engine"}


def test_migrated_schema_keeps_what_autogenerate_does_not_compare(db_url):
    """Autogenerate (the test above) sees neither CHECK constraints, nor a foreign key's ON DELETE,
    nor a partial index's WHERE: a migration that lost one, or a model changed without its
    migration, would pass it. These are the ledger's and the names' guards: compared here."""
    from sqlalchemy import CheckConstraint, inspect

    def spaced(sql) -> str:
        return " ".join(str(sql).split()) if sql is not None else ""
    engine = create_engine(db_url)
    inspector = inspect(engine)
    sqlite = engine.dialect.name == "sqlite"
    for table in Base.metadata.sorted_tables:
        checks = {c.name: spaced(c.sqltext) for c in table.constraints if isinstance(c, CheckConstraint)}
        found = {c["name"]: spaced(c["sqltext"]) for c in inspector.get_check_constraints(table.name)}
        # PostgreSQL writes a CHECK back in its own words: there, the names
        assert (found if sqlite else set(found)) == (checks if sqlite else set(checks)), table.name
        on_delete = {tuple(fk.parent.name for fk in c.elements): c.ondelete for c in table.foreign_key_constraints}
        found_fks = {tuple(fk["constrained_columns"]): fk["options"].get("ondelete")
                     for fk in inspector.get_foreign_keys(table.name)}
        assert found_fks == on_delete, table.name
        where = {i.name: spaced(i.dialect_options["sqlite" if sqlite else "postgresql"]["where"])
                 for i in table.indexes}
        found_where = {i["name"]: spaced(i.get("dialect_options", {}).get(f"{engine.dialect.name}_where"))
                       for i in inspector.get_indexes(table.name)
                       if not i.get("duplicates_constraint")}   # PostgreSQL's index of a UNIQUE
        if not sqlite:   # ... and a WHERE: whether there is one
            where, found_where = ({k: bool(v) for k, v in d.items()} for d in (where, found_where))
        assert found_where == where, table.name
    engine.dispose()


def test_first_eta_migration_adds_a_nullable_column_and_goes_back(tmp_path):
    from alembic import command
    from sqlalchemy import inspect

    from gpu_tenancy.db import migrate
    url = f"sqlite:///{tmp_path / 'steps.db'}"
    migrate.upgrade(url, "0011_lease_network")
    engine = create_engine(url)
    assert "first_eta" not in {c["name"] for c in inspect(engine).get_columns("leases")}
    migrate.upgrade(url, "0012_first_eta")
    engine.dispose()
    column = {c["name"]: c for c in inspect(engine).get_columns("leases")}["first_eta"]
    assert column["nullable"]
    command.downgrade(migrate.alembic_config(url), "0011_lease_network")
    engine.dispose()
    assert "first_eta" not in {c["name"] for c in inspect(engine).get_columns("leases")}
    engine.dispose()


def test_the_lease_ask_indexes_go_and_come_back_valid(db_url):
    """0022 builds its indexes CONCURRENTLY on PostgreSQL (no write to leases waits for the
    build), outside the migration's transaction, and drops them so too; plainly on SQLite."""
    from alembic import command
    from sqlalchemy import inspect, text

    from gpu_tenancy.db import migrate
    names = {"ix_leases_project_name", "ix_leases_project_status_user"}
    engine = create_engine(db_url)

    def indexes() -> set[str]:
        found = {i["name"] for i in inspect(engine).get_indexes("leases")} & names
        if engine.dialect.name == "postgresql":   # a failed concurrent build leaves an invalid index
            with engine.connect() as conn:
                assert conn.scalar(text("SELECT bool_and(indisvalid) FROM pg_index JOIN pg_class c "
                                        "ON c.oid = indexrelid WHERE relname LIKE 'ix_leases_project_%'")) in (True, None)
        engine.dispose()
        return found
    assert indexes() == names
    with statements_run() as run:
        command.downgrade(migrate.alembic_config(db_url), "0021_park")
    assert indexes() == set()
    dropped = [s for s in run if s.startswith("DROP INDEX") and any(name in s for name in names)]
    with statements_run() as run:
        migrate.upgrade(db_url)
    assert indexes() == names
    created = [s for s in run if s.startswith("CREATE INDEX") and any(name in s for name in names)]
    assert len(dropped) == len(created) == 2
    if engine.dialect.name == "postgresql":
        assert all(s.startswith("DROP INDEX CONCURRENTLY IF EXISTS") for s in dropped)
        assert all(s.startswith("CREATE INDEX CONCURRENTLY") for s in created)


def test_the_lease_ask_indexes_are_built_again_over_a_cancelled_build(db_url):
    """A cancelled CREATE INDEX CONCURRENTLY leaves its index, invalid, and the version at 0021
    (PostgreSQL): the upgrade run again drops it and builds it anew, valid, not failing on the name."""
    from alembic import command
    from sqlalchemy import text

    from gpu_tenancy.db import migrate
    engine = create_engine(db_url)
    if engine.dialect.name != "postgresql":
        engine.dispose()
        pytest.skip("SQLite builds its indexes in the migration's transaction: nothing is left")
    command.downgrade(migrate.alembic_config(db_url), "0021_park")
    with engine.begin() as conn:   # what a build cancelled halfway leaves: the names taken, one invalid
        conn.execute(text("CREATE INDEX ix_leases_project_name ON leases (project_id)"))
        conn.execute(text("CREATE INDEX ix_leases_project_status_user ON leases (user_id)"))
        conn.execute(text("UPDATE pg_index SET indisvalid = false "
                          "WHERE indexrelid = 'ix_leases_project_status_user'::regclass"))
    migrate.upgrade(db_url)
    with engine.connect() as conn:
        built = dict(conn.execute(text(
            "SELECT c.relname, i.indisvalid AND pg_get_indexdef(i.indexrelid) LIKE "
            "'%' || CASE c.relname WHEN 'ix_leases_project_name' THEN '(project_id, name)' "
            "ELSE '(project_id, status, user_id)' END FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname IN ('ix_leases_project_name', 'ix_leases_project_status_user')")).all())
        version = conn.scalar(text("SELECT version_num FROM alembic_version"))
    engine.dispose()
    assert built == {"ix_leases_project_name": True, "ix_leases_project_status_user": True}
    assert version == ScriptDirectory.from_config(migrate.alembic_config(db_url)).get_current_head()


def test_the_history_read_indexes_go_and_come_back(db_url):
    """0032 builds (project_id, created_at, id) in the place of (project_id, created_at), and the
    index of the leases ended early for another (partial), CONCURRENTLY on PostgreSQL; a downgrade
    gives the old index back."""
    from alembic import command
    from sqlalchemy import inspect

    from gpu_tenancy.db import migrate
    engine = create_engine(db_url)

    def indexes() -> dict[str, list[str]]:
        found = {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("leases")
                 if i["name"] in ("ix_leases_project_created", "ix_leases_project_created_id", "ix_leases_early_end_for")}
        engine.dispose()
        return found
    head = {"ix_leases_project_created_id": ["project_id", "created_at", "id"],
            "ix_leases_early_end_for": ["early_end_for"]}
    assert indexes() == head
    command.downgrade(migrate.alembic_config(db_url), "0031_leases_created_index")
    assert indexes() == {"ix_leases_project_created": ["project_id", "created_at"]}
    with statements_run() as run:
        migrate.upgrade(db_url)
    assert indexes() == head
    if engine.dialect.name == "postgresql":
        created = [s for s in run if s.startswith("CREATE INDEX") and " ON leases " in s]   # not 0033's
        assert len(created) == 2 and all(s.startswith("CREATE INDEX CONCURRENTLY") for s in created)


def test_the_events_lease_order_index_goes_and_comes_back(db_url):
    """0033 builds (lease_id, id) in the place of (lease_id), CONCURRENTLY on PostgreSQL (over a
    build cancelled before: dropped and built again, valid); a downgrade gives the old index back."""
    from alembic import command
    from sqlalchemy import inspect, text

    from gpu_tenancy.db import migrate
    engine = create_engine(db_url)
    postgresql = engine.dialect.name == "postgresql"

    def indexes() -> dict[str, list[str]]:
        found = {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("events")}
        if postgresql:   # a failed concurrent build leaves an invalid index
            with engine.connect() as conn:
                assert conn.scalar(text("SELECT bool_and(indisvalid) FROM pg_index JOIN pg_class c "
                                        "ON c.oid = indexrelid WHERE relname LIKE 'ix_events_%'")) in (True, None)
        engine.dispose()
        return found
    head = {"ix_events_lease_id_id": ["lease_id", "id"]}
    assert indexes() == head
    with statements_run() as run:
        command.downgrade(migrate.alembic_config(db_url), "0032_history_read_indexes")
    assert indexes() == {"ix_events_lease_id": ["lease_id"]}
    if postgresql:
        assert [s for s in run if s.startswith(("CREATE INDEX", "DROP INDEX"))] == [
            "DROP INDEX CONCURRENTLY IF EXISTS ix_events_lease_id",   # none: a downgrade run again
            "CREATE INDEX CONCURRENTLY ix_events_lease_id ON events (lease_id)",
            "DROP INDEX CONCURRENTLY IF EXISTS ix_events_lease_id_id"]
        with engine.begin() as conn:   # what a build cancelled halfway leaves: the name taken, invalid
            conn.execute(text("CREATE INDEX ix_events_lease_id_id ON events (lease_id)"))
            conn.execute(text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'ix_events_lease_id_id'::regclass"))
        engine.dispose()
    with statements_run() as run:
        migrate.upgrade(db_url)
    assert indexes() == head
    if postgresql:
        created = [s for s in run if s.startswith("CREATE INDEX")]
        assert created == ["CREATE INDEX CONCURRENTLY ix_events_lease_id_id ON events (lease_id, id)"]


@contextmanager
def statements_run() -> Iterator[list[str]]:
    """The SQL every engine runs meanwhile (the migrations make their own)."""
    run: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        run.append(" ".join(statement.split()))
    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield run
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def test_a_migration_failing_after_0022_keeps_the_versions_before_it(db_url, tmp_path):
    """PostgreSQL: each migration commits with its version: one failing later in the same upgrade
    leaves the version at the one before it, not at 0021 under 0022's indexes (built outside any
    transaction, so they stay whatever follows). SQLite: the run is one transaction, all of it or
    nothing (db/migration_run.py): the version and the indexes are back at 0021."""
    import shutil

    from alembic import command
    from sqlalchemy import inspect, text

    from gpu_tenancy.db import migrate
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    config = migrate.alembic_config(db_url)
    head = ScriptDirectory.from_config(config).get_current_head()
    (scripts / "versions" / "9999_fails.py").write_text(
        f"revision = '9999_fails'\ndown_revision = {head!r}\nbranch_labels = depends_on = None\n\n\n"
        "def upgrade():\n    raise RuntimeError('a later migration fails')\n\n\n"
        "def downgrade():\n    pass\n")
    command.downgrade(config, "0021_park")
    config.set_main_option("script_location", str(scripts))
    with pytest.raises(RuntimeError, match="a later migration fails"):
        command.upgrade(config, "head")
    engine = create_engine(db_url)
    with engine.connect() as conn:
        version = conn.scalar(text("SELECT version_num FROM alembic_version"))
    made = {i["name"] for i in inspect(engine).get_indexes("leases")}
    engine.dispose()
    built = {"ix_leases_project_name", "ix_leases_project_status_user"} & made
    if engine.dialect.name == "sqlite":
        assert (version, built) == ("0021_park", set())
    else:
        assert version == head
        assert built == {"ix_leases_project_name", "ix_leases_project_status_user"}


def as_then(session, lease: dict) -> None:
    """A lease row written at an older revision: only the columns given (and those with
    defaults), not every column of today's model, which that schema may not have yet."""
    from sqlalchemy import insert

    from gpu_tenancy.db import models as m
    session.execute(insert(m.Lease.__table__), lease)


def test_planned_hosts_cleared_as_json_null_become_null(db_url):
    """0028: hosts a replan cleared were stored as JSON null, which the create's fit took for a
    lease placed on no hosts (engine/plan_insert.py, build); they become NULL, kept hosts stay."""
    from datetime import datetime

    from alembic import command
    from sqlalchemy import JSON, String, cast, update
    from sqlalchemy.orm import Session

    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    config = migrate.alembic_config(db_url)
    command.downgrade(config, "0027_start_by_basis")
    engine = create_engine(db_url)
    at = datetime(2026, 12, 5, 8, 0, 0)
    with Session(engine) as session:
        session.add(m.Shape(name="a100.x1", gpu_model="A100", gpus=1, vcpus=1, ram_mb=1024, disk_gb=10,
                            pci_alias="gpu", created_at=at))
        session.flush()
        for k, hosts in enumerate((["h1", "h1"], None, None)):
            as_then(session, dict(
                id=f"3f0c2d1e-0000-4000-8000-00000000000{k}", name=f"l{k}", project_id="p", user_id="u",
                status="queued", shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=2, duration=3600,
                earliest_start=at, start_at=at, end_at=at, queue_reasons=[], planned_hosts=hosts,
                flavor_id="f", flavor_name="lease-l", priority_class=None, preemptible=False,
                created_at=at, updated_at=at))
        session.flush()
        # the second as the code before cleared it (JSON null); the third never had any (NULL)
        session.execute(update(m.Lease).where(m.Lease.name == "l1").values(planned_hosts=JSON.NULL))
        session.commit()

    def stored() -> dict[str, str | None]:
        with engine.connect() as conn:
            return dict(conn.execute(select(m.Lease.name, cast(m.Lease.planned_hosts, String))).all())
    assert stored()["l1"] == "null"
    command.upgrade(config, "head")
    after = stored()
    engine.dispose()
    assert after["l1"] is None and after["l2"] is None and after["l0"].replace(" ", "") == '["h1","h1"]'


def test_unfinished_leases_sharing_a_name_keep_it_on_the_first_and_the_index_is_built(db_url):
    """0029: the first made of a project's unfinished leases of one name keeps it; each other is
    renamed to its id, with an event saying so; finished leases and other projects' are left as
    they are; after, a second unfinished lease of a name is refused by the database."""
    from datetime import datetime, timedelta

    from alembic import command
    from sqlalchemy.exc import IntegrityError
    from sqlalchemy.orm import Session

    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    config = migrate.alembic_config(db_url)
    command.downgrade(config, "0028_planned_hosts_null")
    engine = create_engine(db_url)
    at = datetime(2026, 12, 6, 8, 0, 0)

    def lease(k: int, project: str, status: str, made: datetime) -> dict:
        return dict(id=f"3f0c2d1e-0000-4000-8000-0000000000{k:02d}", name="train", project_id=project,
                    user_id="u", status=status, shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=1,
                    duration=3600, earliest_start=made, queue_reasons=[], created_at=made, updated_at=made)
    with Session(engine) as session:
        session.add(m.Shape(name="a100.x1", gpu_model="A100", gpus=1, vcpus=1, ram_mb=1024, disk_gb=10,
                            pci_alias="gpu", created_at=at))
        session.flush()
        # made in the order 3, 1, 2 (by created_at); 4 is finished; 5 is another project's
        for k, project, status, made in ((1, "p", "queued", at + timedelta(minutes=1)),
                                         (2, "p", "active", at + timedelta(minutes=2)), (3, "p", "scheduled", at),
                                         (4, "p", "ended", at - timedelta(days=1)),
                                         (5, "q", "queued", at + timedelta(minutes=3))):
            as_then(session, lease(k, project, status, made))
        session.commit()
    command.upgrade(config, "head")
    with Session(engine) as session:
        names = dict(session.execute(select(m.Lease.id, m.Lease.name)).all())
        events = session.execute(select(m.Event.lease_id, m.Event.kind, m.Event.actor, m.Event.message)).all()
    ids = sorted(names)
    assert [names[i] for i in ids] == [ids[0], ids[1], "train", "train", "train"]   # 3 was made first
    assert sorted((e.lease_id, e.kind, e.actor) for e in events) == [(ids[0], "renamed", "migration"),
                                                                     (ids[1], "renamed", "migration")]
    assert all("'train'" in e.message and ids[2] in e.message for e in events)   # which lease kept it
    with Session(engine) as session:
        session.add(m.Lease(**lease(6, "p", "queued", at + timedelta(minutes=9))))
        with pytest.raises(IntegrityError):
            session.commit()
    engine.dispose()


def made_up_row(table, step: int, i: int, parents: dict[str, dict]) -> dict:
    """A row for `table` as its schema is at this revision: every column given (i = 0) or only
    those that must be (i = 1); a key or a reference is the step's own rows' (`parents`, by table).
    Positive numbers and an end after its start: every CHECK of the schema holds."""
    from datetime import datetime, timedelta

    from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String
    row: dict = {}
    for column in table.columns:
        fk = next(iter(column.foreign_keys), None)
        if fk is not None:
            row[column.name] = parents[fk.column.table.name][fk.column.name]
        elif column.nullable and i == 1:
            row[column.name] = None
        elif isinstance(column.type, Boolean):
            row[column.name] = True
        elif isinstance(column.type, Integer):
            row[column.name] = 100 * step + 10 * i + 1 if column.primary_key else step + 1
        elif isinstance(column.type, Float):
            row[column.name] = 1.5
        elif isinstance(column.type, DateTime):
            at = datetime(2026, 1, 1) + timedelta(minutes=step)
            row[column.name] = at + timedelta(days=1) if "end" in column.name else at
        elif isinstance(column.type, JSON):
            row[column.name] = ["v", step]
        elif isinstance(column.type, String) and column.type.length and column.type.length < 16:
            row[column.name] = f"{step}.{i}"
        else:
            row[column.name] = f"{table.name[:6]}-{step}-{i}"
    return row


def test_rows_written_at_every_revision_survive_the_upgrade_to_head(db_url):
    """An older database with rows in it: from the first revision on, each revision's every table
    gets two rows (one with every column filled, one with none it may leave NULL); after the
    upgrade to head every row is still there with what it held, the schema is the models', and
    the constraints hold (a CHECK refuses, a lease's delete takes its rows with it)."""
    from alembic import command
    from sqlalchemy import MetaData, and_, delete, func, insert
    from sqlalchemy.exc import IntegrityError

    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import make_engine
    config = migrate.alembic_config(db_url)
    command.downgrade(config, "base")
    revisions = [r.revision for r in reversed(list(ScriptDirectory.from_config(config).walk_revisions()))]
    written: list[tuple[str, dict]] = []
    for step, revision in enumerate(revisions):
        command.upgrade(config, revision)
        engine = create_engine(db_url)
        then = MetaData()
        then.reflect(engine)
        with engine.begin() as conn:
            for i in (0, 1):
                parents: dict[str, dict] = {}
                for table in then.sorted_tables:
                    if table.name == "alembic_version":
                        continue
                    row = parents[table.name] = made_up_row(table, step, i, parents)
                    conn.execute(insert(table), row)
                    written.append((table.name, row))
        engine.dispose()
    engine = create_engine(db_url)
    now = MetaData()
    now.reflect(engine)
    with engine.connect() as conn:
        for name, row in written:
            table = now.tables[name]
            key = and_(*(c == row[c.name] for c in table.primary_key.columns))
            kept = conn.execute(select(*(table.c[c] for c in row)).where(key)).mappings().all()
            assert [dict(r) for r in kept] == [row], (name, row)
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()
    engine = make_engine(db_url)   # the service's own connections: SQLite enforces the foreign keys
    lease = next(row for name, row in written if name == "leases")
    with engine.begin() as conn, pytest.raises(IntegrityError):
        conn.execute(insert(m.Allocation), dict(
            lease_id=lease["id"], project_id="p", vm_index=99, host="h", gpu_model="A100", gpus=1,
            start_at=lease["earliest_start"], end_at=lease["earliest_start"], borrowing=False))
    with engine.begin() as conn:
        conn.execute(delete(m.Lease).where(m.Lease.id == lease["id"]))
    with engine.connect() as conn:
        left = [conn.scalar(select(func.count()).select_from(t).where(t.c.lease_id == lease["id"]))
                for t in (m.Allocation.__table__, m.Server.__table__, m.Event.__table__)]
    engine.dispose()
    assert left == [0, 0, 0]


def scripts_with(tmp_path, url: str, migration: str) -> tuple:
    """The migrations and one more after head (`migration`: its upgrade's body), in a copy:
    the Alembic config that runs them on `url`, and the new revision."""
    import shutil

    from gpu_tenancy.db import migrate
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    config = migrate.alembic_config(url)
    head = ScriptDirectory.from_config(config).get_current_head()
    (scripts / "versions" / "9999_next.py").write_text(
        "import time\n\nimport sqlalchemy as sa\nfrom alembic import op\n\n"
        f"revision = '9999_next'\ndown_revision = {head!r}\nbranch_labels = depends_on = None\n\n\n"
        f"def upgrade():\n{migration}\n\n\ndef downgrade():\n    pass\n")
    config.set_main_option("script_location", str(scripts))
    return config, head


def test_a_migration_failing_halfway_keeps_none_of_its_work(db_url, tmp_path):
    """A migration that fails after some of its DDL (a data step refusing a real row, a process
    stopped) leaves nothing of it: not a column added with the version not moved, which the run
    that follows the fix fails on ("duplicate column"), the operator left to mend the schema by hand."""
    from alembic import command
    from sqlalchemy import inspect, text

    config, head = scripts_with(tmp_path, db_url, (
        "    op.add_column('leases', sa.Column('next_thing', sa.Integer(), nullable=True))\n"
        "    op.create_table('next_things', sa.Column('id', sa.Integer(), primary_key=True))\n"
        "    raise RuntimeError('a row it cannot take')"))
    with pytest.raises(RuntimeError, match="a row it cannot take"):
        command.upgrade(config, "head")
    engine = create_engine(db_url)
    with engine.connect() as conn:
        version = conn.scalar(text("SELECT version_num FROM alembic_version"))
    columns = {c["name"] for c in inspect(engine).get_columns("leases")}
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert version == head
    assert "next_thing" not in columns and "next_things" not in tables


def test_two_upgrades_at_once_both_end_at_head(db_url, tmp_path):
    """`gpu-tenancy db upgrade` run by two processes at once (the deploy playbook runs it on every
    API host): the second waits for the first, then finds nothing to do. Before, it read the version
    the first had not moved yet, ran the same migration again and failed ("duplicate column"), and on
    PostgreSQL two runs over 0022/0029 could both fail, leaving the schema halfway."""
    import subprocess
    import sys

    from sqlalchemy import inspect, text
    config, head = scripts_with(tmp_path, db_url, (
        "    op.add_column('leases', sa.Column('next_thing', sa.Integer(), nullable=True))\n"
        "    time.sleep(3)   # the other run starts meanwhile"))
    run = ("import sys\nfrom alembic import command\nfrom gpu_tenancy.db import migrate\n"
           "config = migrate.alembic_config(sys.argv[1])\n"
           "config.set_main_option('script_location', sys.argv[2])\n"
           "command.upgrade(config, 'head')\n")
    script_location = config.get_main_option("script_location")
    runs = [subprocess.Popen([sys.executable, "-c", run, db_url, script_location],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [r.communicate(timeout=120)[0] for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outputs
    engine = create_engine(db_url)
    with engine.connect() as conn:
        version = conn.scalar(text("SELECT version_num FROM alembic_version"))
    columns = [c["name"] for c in inspect(engine).get_columns("leases")]
    engine.dispose()
    assert version == "9999_next" and columns.count("next_thing") == 1


def test_an_upgrade_of_a_database_a_newer_release_made_says_so_and_changes_nothing(db_url, capsys):
    """A database a newer release upgraded (a roll-back of the code, or an old host left in the
    deploy): `db upgrade` and `db current` say what is wrong and what to do, exit 2, no traceback."""
    from sqlalchemy import text

    from gpu_tenancy.cli import main
    engine = create_engine(db_url)
    with engine.begin() as conn:
        was = conn.scalar(text("SELECT version_num FROM alembic_version"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_a_newer_release'"))
    try:
        for action in ("upgrade", "current"):
            assert main(["db", action, "--db", db_url]) == 2
            err = capsys.readouterr().err
            assert "0099_from_a_newer_release" in err and "newer release" in err and "Traceback" not in err
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT version_num FROM alembic_version")) == "0099_from_a_newer_release"
    finally:   # (on PostgreSQL the test database outlives the test)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :was"), {"was": was})
        engine.dispose()


def test_every_projects_lease_listing_reads_its_page_off_an_index(client, db_url):
    """GET /v1/leases?all_projects=true, oldest first (each admin page of the dashboard asks for one
    lease so) and newest first (the admin calendar), and the page's allocations, servers and
    failures: each reads the leases through ix_leases_created (0031), not every lease ever made,
    read and sorted (SQLite's plan: SCAN leases, USE TEMP B-TREE FOR ORDER BY)."""
    import sqlite3

    from tests.conftest import headers
    if not db_url.startswith("sqlite"):
        pytest.skip("the plan is SQLite's EXPLAIN QUERY PLAN")
    admin = headers("ml-vision", "admin")
    for k in range(3):
        assert client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "name": f"l{k}"},
                           headers=admin).status_code == 201
    run: list[tuple[str, tuple]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        if "FROM leases" in statement and "leases.created_at" in statement:
            run.append((statement, parameters))
    event.listen(Engine, "before_cursor_execute", record)
    try:
        for query in ("limit=1", "limit=2&sort_dir=desc"):
            reply = client.get(f"/v1/leases?all_projects=true&{query}", headers=admin)
            assert reply.status_code == 200 and reply.get_json()["leases"]
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert len(run) >= 4   # two pages, and at least the allocations' read of each
    conn = sqlite3.connect(db_url[len("sqlite:///"):])
    plans = [[row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, parameters)]
             for statement, parameters in run]
    conn.close()
    for (statement, _), plan in zip(run, plans):
        leases = [step for step in plan if " leases " in f"{step} "]
        assert leases and all("ix_leases_created" in step for step in leases), (statement, plan)
        assert not any("TEMP B-TREE" in step for step in plan), (statement, plan)


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
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        locks = set(conn.scalars(select(Lock.name)))
    engine.dispose()
    assert diff == []
    assert locks == {"ledger", "engine"}


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
    """Each migration commits with its version: one failing later in the same upgrade leaves
    the version at the one before it, not at 0021 under 0022's indexes (built outside any
    transaction on PostgreSQL, so they stay whatever follows)."""
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
    assert version == head
    assert {"ix_leases_project_name", "ix_leases_project_status_user"} <= made


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

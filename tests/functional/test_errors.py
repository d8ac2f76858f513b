"""Bad input anywhere gets a 4xx in the OpenStack API-WG error form, never a 500,
with a request id that matches the X-OpenStack-Request-Id header."""
from __future__ import annotations

import pytest

from tests.conftest import headers

ADMIN = headers("ml-vision", "admin")
WRITES = [("POST", "/v1/leases"), ("PATCH", "/v1/leases/{lease}"), ("POST", "/v1/shapes"),
          ("POST", "/v1/images"), ("PUT", "/v1/quotas/ml-vision")]


@pytest.fixture
def lease_id(client):
    response = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H"}, headers=ADMIN)
    return response.get_json()["lease"]["id"]


def api_error(response, status: int) -> dict:
    """The one error of an API-WG error body, after checking its form."""
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert list(body) == ["errors"] and len(body["errors"]) == 1
    error = body["errors"][0]
    assert set(error) == {"status", "code", "title", "detail", "request_id"}
    assert error["status"] == status and error["code"].startswith("gpu_tenancy.") and error["title"]
    assert error["detail"] and len(error["detail"]) < 1000
    assert error["request_id"].startswith("req-")
    assert error["request_id"] == response.headers["X-OpenStack-Request-Id"]
    return error


@pytest.mark.parametrize("method, path", WRITES)
@pytest.mark.parametrize("data, content_type", [
    (b"{", "application/json"),                    # malformed
    (b'{"shape": "a100.x1",}', "application/json"),  # trailing comma
    (b"", "application/json"),                     # empty
    (b"[]", "application/json"),                   # not an object
    (b'"text"', "application/json"),
    (b"null", "application/json"),
    (b"shape=a100.x1", "application/x-www-form-urlencoded"),
    (b"\xff\xfe\x00", "application/json"),         # not UTF-8
])
def test_bodies_that_are_not_a_json_object(client, lease_id, method, path, data, content_type):
    response = client.open(path.format(lease=lease_id), method=method, data=data, content_type=content_type,
                           headers=ADMIN)
    api_error(response, 400)


@pytest.mark.parametrize("method, path", WRITES)
@pytest.mark.parametrize("body", [
    {"unknown_field": 1},
    {"name": "x" * 10_000, "shape": "a100.x1", "duration": "PT1H"},
    {"shape": 5, "duration": [], "gpus": "many", "quota": "all"},
    {"quota": {"gpu_models": {"A100": {"gpus": 1.5}}}, "end": 7, "cloud_ref": None},
])
def test_bodies_with_wrong_fields_or_types_name_the_problem(client, lease_id, method, path, body):
    response = client.open(path.format(lease=lease_id), method=method, json=body, headers=ADMIN)
    assert "invalid input" in api_error(response, 400)["detail"]


def test_a_too_long_name_is_refused_and_not_echoed_in_full(client):
    response = client.post("/v1/leases", json={"name": "n" * 10_000, "shape": "a100.x1", "duration": "PT1H"},
                           headers=ADMIN)
    error = api_error(response, 400)
    assert "name" in error["detail"]


def test_unknown_fields_are_named(client):
    response = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "gpu": 4}, headers=ADMIN)
    assert "'gpu'" in api_error(response, 400)["detail"]


@pytest.mark.parametrize("method, body, told", [
    ("POST", {"shape": "a100.x1", "duration": "PT1H", "volume": {"size": 100}}, '{"size_gb": N}'),
    ("POST", {"shape": "a100.x1", "duration": "PT1H", "volume": {"id": ""}}, '{"id": "<volume id>"}'),
    ("POST", {"shape": "a100.x1", "duration": 3.5}, "24h"),
    ("PATCH", {}, '{"end": "<RFC 3339 time>"}'),
    ("PATCH", {"end": "2026-12-09T10:00:00Z", "duration": "48h"}, "one of the two"),
])
def test_a_value_of_the_wrong_form_is_told_the_forms_it_may_take(client, lease_id, method, body, told):
    """A value that may take one of several forms was refused as "... is not valid under any of
    the given schemas", which tells a newcomer nothing of what to send."""
    path = "/v1/leases" if method == "POST" else f"/v1/leases/{lease_id}"
    detail = api_error(client.open(path, method=method, json=body, headers=ADMIN), 400)["detail"]
    assert "given schemas" not in detail and told in detail, detail


@pytest.mark.parametrize("method, path", WRITES)
def test_a_body_over_1_mib_is_413(client, lease_id, method, path):
    data = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
    response = client.open(path.format(lease=lease_id), method=method, data=data, content_type="application/json",
                           headers=ADMIN)
    api_error(response, 413)


@pytest.mark.parametrize("path", ["/v1/nothing", "/v1/leases/x/y/z", "/v2/leases", "/v1/shapes/a/b"])
def test_unknown_routes_are_404(client, path):
    api_error(client.get(path, headers=ADMIN), 404)


def test_unknown_ids_are_404(client):
    assert api_error(client.get("/v1/leases/0000", headers=ADMIN), 404)["code"] == "gpu_tenancy.lease_not_found"


@pytest.mark.parametrize("method, path, allowed", [
    ("PUT", "/v1/leases", {"GET", "POST"}),
    ("POST", "/v1/shapes/a100.x1", {"GET", "DELETE"}),
    ("DELETE", "/v1/quotas/ml-vision", {"GET", "PUT"}),
    ("POST", "/v1/capacity", {"GET"}),
    ("DELETE", "/v1/usage", {"GET"}),
])
def test_wrong_methods_are_405_with_allow(client, method, path, allowed):
    response = client.open(path, method=method, headers=ADMIN)
    api_error(response, 405)
    assert allowed <= {m.strip() for m in response.headers["Allow"].split(",")}


@pytest.mark.parametrize("url", [
    "/v1/leases?limit=abc", "/v1/leases?limit=0", "/v1/leases?limit=999999", "/v1/leases?status=running",
    "/v1/leases?marker=nope", "/v1/leases?dry_run=maybe", "/v1/shapes?include_retired=yes",
    "/v1/images?include_retired=2", "/v1/capacity?start=now&end=later", "/v1/capacity?end=2026-12-01T00:00:00Z",
    "/v1/usage?start=2026-13-01T00:00:00Z", "/v1/usage?start=2026-12-01T00:00:00Z&end=2026-11-01T00:00:00Z",
    "/v1/leases?status=" + "q" * 5000, "/v1/leases?marker=" + "q" * 5000,     # not echoed whole (api_error)
], ids=lambda url: url[:60])
def test_bad_query_strings_are_400(client, url):
    api_error(client.get(url, headers=ADMIN) if "dry_run" not in url else
              client.post(url, json={"shape": "a100.x1", "duration": "PT1H"}, headers=ADMIN), 400)


@pytest.mark.parametrize("path", ["/v1/leases/%00", "/v1/shapes/" + "s" * 5000, "/v1/quotas/%ff%fe",
                                  "/v1/images/..%2f..%2fetc"])
def test_odd_path_values_are_not_500(client, path):
    response = client.get(path, headers=ADMIN)
    assert response.status_code < 500
    if response.status_code >= 400:
        api_error(response, response.status_code)


@pytest.mark.parametrize("method, path", [
    ("GET", "/v1/shapes/a%00"), ("GET", "/v1/images/a%00"), ("GET", "/v1/budgets/%00"),
    ("GET", "/v1/priority_classes/%00"), ("PUT", "/v1/priority_classes/%00"), ("GET", "/v1/hosts/h%00"),
    ("GET", "/v1/quotas/p%0a"), ("DELETE", "/v1/webhooks/p%7f"), ("GET", "/v1/whatif/%00"),
    ("GET", "/v1/leases/%00/events"), ("POST", "/v1/leases/%00/readiness"), ("GET", "/v1/shapes/" + "s" * 256),
], ids=lambda value: value[:40])
def test_unprintable_or_overlong_path_values_are_400_on_every_route(client, method, path):
    """Checked once for every route (app.py): a handler looked up a NUL as given, and
    PostgreSQL refused the query (a 500); the readiness report is checked before its token."""
    response = client.open(path, method=method, json={}, headers=ADMIN)
    error = api_error(response, 400)
    assert error["code"] == "gpu_tenancy.invalid_identifier" and "printable" in error["detail"]


@pytest.mark.parametrize("method, url", [("GET", "/v1/quotas/" + "p" * 65), ("PUT", "/v1/quotas/" + "p" * 65),
                                         ("GET", "/v1/usage?project_id=" + "p" * 65),
                                         ("GET", "/v1/quotas?project_id=%01")])
def test_project_ids_longer_than_keystone_allows_are_400(client, method, url):
    response = client.open(url, method=method, json={"quota": {"gpu_models": {"A100": {"gpus": 1}}}}, headers=ADMIN)
    assert api_error(response, 400)["code"] == "gpu_tenancy.invalid_identifier"


def test_no_identity_is_401_in_the_error_form(client):
    error = api_error(client.get("/v1/leases"), 401)
    assert "X-Auth-Token" in error["detail"]
    api_error(client.post("/v1/leases", json={}, headers={"X-Roles": "admin"}), 401)


def test_every_response_carries_a_fresh_request_id(client):
    first = client.get("/v1/shapes", headers=ADMIN).headers["X-OpenStack-Request-Id"]
    second = client.get("/v1/shapes", headers=ADMIN).headers["X-OpenStack-Request-Id"]
    assert first.startswith("req-") and first != second


LEASE_OK = {"shape": "a100.x1", "duration": "PT1H"}


@pytest.mark.parametrize("change", [
    {"instances": 10 ** 30}, {"instances": 2 ** 63}, {"duration": 10 ** 20}, {"duration": "P99999999Y"},
    {"volume": {"size_gb": 10 ** 12}}, {"priority": 10 ** 9}, {"start": "9" * 64}, {"duration": 1e308},
    {"instances": -1}, {"duration": -3600}, {"duration": "-PT1H"}, {"volume": {"size_gb": -5}}, {"priority": -101},
    {"instances": 0}, {"duration": 0}, {"start": "-2026-12-01T00:00:00Z"},
    {"shape": "a100.x1\u202e"}, {"shape": "ᴀ100.x1"}, {"image": "ubuntu-22.04-cuda-12\u0000"}, {"name": "\ud83d"},
    {"name": "tab\there"}, {"duration": "PT１H"},
    {"instances": "2"}, {"instances": True}, {"instances": 1.5}, {"duration": None}, {"volume": "100"},
    {"volume": {"size_gb": "10"}}, {"volume": {"id": 7}}, {"key_name": ["k"]}, {"user_data": {"a": 1}},
    {"shape": "a100.x1' OR '1'='1"}, {"shape": "a100.x1; DROP TABLE leases;--"}, {"image": "../../etc/passwd"},
    {"start": "2026-12-01T08:00:00Z'; DELETE FROM leases;--"},
], ids=lambda change: repr(change)[:60])
def test_bad_lease_values_get_a_4xx_and_store_nothing(client, sessions, change):
    from sqlalchemy import func, select

    from gpu_tenancy.db import models as m
    with sessions() as s:
        before = s.scalar(select(func.count()).select_from(m.Lease))
    response = client.post("/v1/leases", json={**LEASE_OK, **change}, headers=ADMIN)
    error = api_error(response, response.status_code)
    assert 400 <= response.status_code < 500
    assert "Traceback" not in error["detail"]
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(m.Lease)) == before
        assert s.scalar(select(func.count()).select_from(m.Shape)) > 0     # nothing dropped either


@pytest.mark.parametrize("name", ["数据集训练 🚀", "Ωmega—run", "'; DROP TABLE leases;--", "<script>alert(1)</script>",
                                  "${jndi:ldap://x}", "{{7*7}}", "a" * 255])
def test_unicode_and_injection_like_names_are_kept_verbatim(client, name):
    created = client.post("/v1/leases", json={**LEASE_OK, "name": name}, headers=ADMIN)
    assert created.status_code == 201, created.get_json()
    lease_id = created.get_json()["lease"]["id"]
    assert client.get(f"/v1/leases/{lease_id}", headers=ADMIN).get_json()["lease"]["name"] == name
    assert client.get("/v1/shapes", headers=ADMIN).status_code == 200


@pytest.mark.parametrize("gpus", [-1, 10 ** 20, "8", None, 1.5, [8]])
def test_bad_quota_values_are_400_and_change_nothing(client, gpus):
    before = client.get("/v1/quotas/ml-vision", headers=ADMIN).get_json()
    response = client.put("/v1/quotas/ml-vision", json={"quota": {"gpu_models": {"A100": {"gpus": gpus}}}},
                          headers=ADMIN)
    api_error(response, 400)
    assert client.get("/v1/quotas/ml-vision", headers=ADMIN).get_json() == before


@pytest.mark.parametrize("lease_id", ["' OR '1'='1", "1; DROP TABLE leases", "💥", "%2e%2e%2f", "-1", "9" * 40])
def test_injection_like_ids_are_404(client, lease_id):
    assert api_error(client.get(f"/v1/leases/{lease_id}", headers=ADMIN), 404)["code"].endswith("not_found")

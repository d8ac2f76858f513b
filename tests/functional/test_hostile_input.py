"""Input a hostile tenant writes to make the service answer 500 (issue 15, finding 12 and
the NaN finding): each is a 4xx in the OpenStack error form, and changes nothing."""
from __future__ import annotations

import re
import tracemalloc
from urllib.parse import quote

import pytest

from gpu_tenancy.api.validation import MAX_DEPTH, too_deep
from tests.conftest import headers
from tests.functional.test_dashboard import login
from tests.functional.test_errors import api_error

ADMIN = headers("admin-project", "admin", "olga")
NESTED = ("[" * 50_000 + "]" * 50_000).encode()    # 100 KB, 50,000 deep


def json_endpoints(app) -> list[tuple[str, str]]:
    """Every API route that takes a body (POST, PUT, PATCH), its placeholders filled."""
    found = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/v1/"):
            continue
        for method in sorted({"POST", "PUT", "PATCH"} & rule.methods):
            found.append((method, re.sub(r"<(?:\w+:)?(\w+)>", "x", rule.rule)))
    return found


def test_a_body_nested_50000_deep_is_a_400_on_every_json_endpoint(app, client):
    endpoints = json_endpoints(app)
    assert len(endpoints) >= 10 and ("POST", "/v1/leases") in endpoints
    refused = []
    for method, path in endpoints:
        reply = client.open(path, method=method, data=NESTED, content_type="application/json", headers=ADMIN)
        if reply.status_code in (401, 404):   # the path's object (or its token) is checked before the body
            api_error(reply, reply.status_code)
            continue
        error = api_error(reply, 400)
        assert error["code"] == "gpu_tenancy.invalid_input" and "32 levels" in error["detail"], (method, path)
        refused.append((method, path))
    assert len(refused) >= len(endpoints) // 2, refused


@pytest.mark.parametrize("depth, status", [(32, 400), (33, 400), (900, 400), (5000, 400)])
def test_nesting_under_the_parser_limit_is_refused_before_anything_walks_it(client, depth, status):
    """Deep, but not deep enough to stop the parser: the check after it refuses it, so the
    schema check and the walks over the body never recurse through it."""
    body = '{"shape": "a100.x1", "duration": "PT1H", "name": ' + "[" * depth + "]" * depth + "}"
    reply = client.post("/v1/leases", data=body, content_type="application/json", headers=headers())
    api_error(reply, status)
    assert client.get("/v1/leases", headers=headers()).get_json()["leases"] == []


@pytest.mark.parametrize("value, limit, deep", [(0, 0, False), ([], 0, True), ([], 1, False), ([[1]], 1, True),
                                                ({"a": [{"b": []}]}, 3, True), ({"a": [{"b": 1}]}, 3, False),
                                                ([0] * 1000 + [[[]]], 2, True)])
def test_the_depth_check_counts_levels_of_arrays_and_objects(value, limit, deep):
    assert too_deep(value, limit) is deep


def test_the_depth_check_walks_the_arrays_and_objects_only():
    """The walk kept every value of the body on its stack in turn: a flat array of 400,000 numbers
    (under 1 MiB) took a third of a second of a worker's CPU, ten times its parse, before any check."""
    flat = [0] * 400_000
    tracemalloc.start()
    try:
        assert not too_deep(flat, MAX_DEPTH) and not too_deep({"name": flat}, MAX_DEPTH)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak    # no entry per number (the stack held some 30 MB of them)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_no_quota_weight(client, constant):
    body = '{"quota": {"gpu_models": {"A100": {"gpus": 4, "weight": %s}}}}' % constant
    reply = client.put("/v1/quotas/ml-vision", data=body, content_type="application/json", headers=ADMIN)
    error = api_error(reply, 400)
    assert constant.lstrip("-") in error["detail"]
    quota = client.get("/v1/quotas/ml-vision", headers=ADMIN).get_json()["quota"]["gpu_models"]["A100"]
    assert quota["gpus"] == 16 and quota["weight"] == 1.0      # the demo's, untouched


@pytest.mark.parametrize("max_duration", ["P3000000D", "P9999999999D", "PT99999999999999999999H"])
def test_a_quota_max_duration_past_what_a_duration_column_holds_is_a_400(client, max_duration):
    """Seconds are kept in a 32-bit integer (PostgreSQL's INTEGER); a day count past what a
    date counts raised OverflowError (a 500 on any database)."""
    reply = client.put("/v1/quotas/ml-vision", headers=ADMIN,
                       json={"quota": {"gpu_models": {"A100": {"gpus": 4, "max_duration": max_duration}}}})
    assert api_error(reply, 400)["code"] == "gpu_tenancy.bad_duration"
    assert client.get("/v1/quotas/ml-vision", headers=ADMIN).get_json()["quota"]["gpu_models"]["A100"]["gpus"] == 16


@pytest.mark.parametrize("constant", ["NaN", "Infinity"])
def test_nan_and_infinity_are_no_budget(client, constant):
    body = '{"budget": {"project_id": "ml-vision", "gpu_model": "A100", "gpu_hours": %s, "period": "month"}}' \
        % constant
    reply = client.post("/v1/budgets", data=body, content_type="application/json", headers=ADMIN)
    assert constant in api_error(reply, 400)["detail"]
    assert client.get("/v1/budgets", headers=ADMIN).get_json()["budgets"] == []


@pytest.mark.parametrize("lease_id", ["abc?x=1", "?", "a#b", "a&b=c"])
def test_odd_characters_in_a_dashboard_lease_id_name_no_lease(client, lease_id):
    """The id in the page's URL goes to the API whole: a '?' in it started a query string
    of the API call, and the page answered 500."""
    csrf = login(client)
    path = "/dashboard/leases/" + quote(lease_id, safe="")
    assert client.get(path).status_code == 404
    for action in ("extend", "cancel"):
        reply = client.post(f"{path}/{action}", data={"csrf_token": csrf, "hours": "1"})
        # extend reads the lease first (the page's 404); cancel says "not cancelled" on the next page
        assert reply.status_code == (404 if action == "extend" else 302), (action, reply.status_code)


@pytest.mark.parametrize("key_name", ["../servers/detail?all_tenants=1", "mine?user_id=someone-else", "..", "a/b",
                                      "k\u00e9y", "mine#x"])
def test_a_key_name_that_nova_would_not_make_is_refused_before_anything_is_made(client, key_name):
    """The name goes into the path of the service's admin request for the user's key pair at
    boot (openstacksdk joins it as it is): only Nova's own key pair names are taken."""
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "key_name": key_name},
                        headers=headers())
    assert api_error(reply, 400)["code"] == "gpu_tenancy.invalid_input"
    assert client.get("/v1/leases", headers=headers()).get_json()["leases"] == []


def test_a_key_name_as_nova_makes_them_is_taken(client):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H",
                                            "key_name": "alice@laptop key_2.old-1"}, headers=headers())
    assert reply.status_code == 201, reply.get_json()

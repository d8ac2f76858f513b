"""Every endpoint for every persona: reader, member and admin of project A
(ml-vision), a member of project B (nlp-lab), and no identity at all."""
from __future__ import annotations

import pytest

from tests.conftest import headers

A, B = "ml-vision", "nlp-lab"
PERSONAS = {
    "reader_a": headers(A, "reader"),
    "member_a": headers(A, "member"),
    "admin_a": headers(A, "admin"),
    "member_b": headers(B, "member"),
    "anonymous": {},
}
NEW_SHAPE = {"name": "a100.x3", "gpu_model": "A100", "gpus": 3, "vcpus": 36, "ram_mb": 368640, "disk_gb": 150,
             "pci_alias": "a100"}
NEW_IMAGE = {"name": "debian-12", "cloud_ref": "7d3c0c8e-0000-4000-8000-000000000001"}
QUOTA = {"quota": {"gpu_models": {"A100": {"gpus": 8}}}}
LEASE = {"shape": "a100.x1", "duration": "PT1H"}
CLASS = {"priority_class": {"priority": 20, "projects": [A]}}
BUDGET = {"budget": {"project_id": A, "gpu_model": "A100", "gpu_hours": 500, "period": "month"}}
WEBHOOK = {"webhook": {"url": "https://hooks.example/gpu"}}

# (method, path, body): expected status per persona, in PERSONAS order.
# {lease} is a lease of project A. Another project's lease is 404: it does not exist for the caller.
TABLE = [
    ("GET", "/v1/leases", None, (200, 200, 200, 200, 401)),
    ("POST", "/v1/leases", LEASE, (403, 201, 201, 201, 401)),
    ("POST", "/v1/leases?dry_run=true", LEASE, (403, 200, 200, 200, 401)),
    ("GET", "/v1/leases?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/leases/{lease}", None, (200, 200, 200, 404, 401)),
    ("GET", "/v1/leases/{lease}/events", None, (200, 200, 200, 404, 401)),
    ("PATCH", "/v1/leases/{lease}", {"duration": "PT2H"}, (403, 200, 200, 404, 401)),
    ("DELETE", "/v1/leases/{lease}", None, (403, 204, 204, 404, 401)),
    # the guest's report needs the lease's secret (X-Lease-Token), which no Keystone identity is
    ("POST", "/v1/leases/{lease}/readiness", {"instance": 0, "ok": True}, (401, 401, 401, 401, 401)),
    ("POST", "/v1/leases/{lease}/utilization", {"instance": 0, "gpus": []}, (401, 401, 401, 401, 401)),
    # done: the lease's secret, or a member's token; this lease is not running yet (409)
    ("POST", "/v1/leases/{lease}/done", None, (403, 409, 409, 404, 401)),
    # resume: members and admins; this lease is not parked (409)
    ("POST", "/v1/leases/{lease}/resume", None, (403, 409, 409, 404, 401)),
    ("GET", "/v1/shapes", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/shapes?include_retired=true", None, (403, 403, 200, 403, 401)),
    ("POST", "/v1/shapes", NEW_SHAPE, (403, 403, 201, 403, 401)),
    ("GET", "/v1/shapes/a100.x1", None, (200, 200, 200, 200, 401)),
    ("DELETE", "/v1/shapes/a100.x1", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/images", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/images?include_retired=true", None, (403, 403, 200, 403, 401)),
    ("POST", "/v1/images", NEW_IMAGE, (403, 403, 201, 403, 401)),
    ("GET", "/v1/images/rocky-9-cuda-12", None, (200, 200, 200, 200, 401)),
    ("DELETE", "/v1/images/rocky-9-cuda-12", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/quotas", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/quotas?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/quotas/ml-vision", None, (200, 200, 200, 403, 401)),
    ("PUT", "/v1/quotas/ml-vision", QUOTA, (403, 403, 200, 403, 401)),
    ("PATCH", "/v1/quotas/ml-vision", QUOTA, (403, 403, 200, 403, 401)),
    ("GET", "/v1/priority_classes", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/priority_classes/high", None, (200, 200, 200, 200, 401)),
    ("PUT", "/v1/priority_classes/high", CLASS, (403, 403, 200, 403, 401)),
    ("DELETE", "/v1/priority_classes/low", None, (403, 403, 204, 403, 401)),
    ("GET", "/v1/budgets", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/budgets?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("POST", "/v1/budgets", BUDGET, (403, 403, 201, 403, 401)),
    ("GET", "/v1/budgets/{budget}", None, (200, 200, 200, 403, 401)),
    ("DELETE", "/v1/budgets/{budget}", None, (403, 403, 204, 403, 401)),
    ("GET", "/v1/capacity", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/capacity?start=2026-12-01T08:00:00Z&end=2026-12-02T08:00:00Z", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/usage", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/usage?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/queue", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/queue?gpu_model=A100", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/share", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/share?gpu_model=H100", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/volumes", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/volumes?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/hosts", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/hosts/gpu-a100-1", None, (403, 403, 200, 403, 401)),
    ("PATCH", "/v1/hosts/gpu-a100-1", {"drained": True}, (403, 403, 200, 403, 401)),
    ("GET", "/v1/audit", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/audit?format=csv", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/webhooks/ml-vision", None, (404, 404, 404, 403, 401)),   # none set yet
    ("PUT", "/v1/webhooks/ml-vision", WEBHOOK, (403, 200, 200, 403, 401)),
    ("DELETE", "/v1/webhooks/ml-vision", None, (403, 404, 404, 403, 401)),
    ("GET", "/v1/openapi.json", None, (200, 200, 200, 200, 200)),
    ("POST", "/v1/whatif", {"days": 1, "changes": ["weight.ml-vision=2"]}, (403, 403, 202, 403, 401)),
    ("GET", "/v1/whatif", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/whatif/nope", None, (403, 403, 404, 403, 401)),   # no such what-if
]
CASES = [pytest.param(method, path, body, persona, expected, id=f"{method} {path} as {persona}")
         for method, path, body, statuses in TABLE
         for persona, expected in zip(PERSONAS, statuses)]


@pytest.fixture
def lease_of_a(client):
    response = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H"}, headers=headers(A))
    assert response.status_code == 201
    return response.get_json()["lease"]["id"]


@pytest.fixture
def budget_of_a(client):
    response = client.post("/v1/budgets", json=BUDGET, headers=PERSONAS["admin_a"])
    assert response.status_code == 201
    return response.get_json()["budget"]["id"]


@pytest.mark.parametrize("method, path, body, persona, expected", CASES)
def test_each_persona_gets_the_right_status(client, lease_of_a, budget_of_a, method, path, body, persona,
                                            expected):
    response = client.open(path.format(lease=lease_of_a, budget=budget_of_a), method=method, json=body,
                           headers=PERSONAS[persona])
    assert response.status_code == expected, response.get_json()
    if expected >= 400:
        error = response.get_json()["errors"][0]
        assert error["status"] == expected and error["request_id"] == response.headers["X-OpenStack-Request-Id"]
        assert error["detail"]
        if expected == 401:
            assert ("X-Lease-Token" if path.endswith(("/readiness", "/utilization")) else "X-Auth-Token") \
                in error["detail"]


def test_the_table_covers_every_endpoint_and_method(app):
    covered = {(method, path.split("?")[0].replace("{lease}", "<lease_id>").replace("{budget}", "<budget_id>")
                .replace("/high", "/<name>").replace("/low", "/<name>")) for method, path, _, _ in TABLE}
    covered = {(method, path.replace("/a100.x1", "/<name>").replace("/rocky-9-cuda-12", "/<name>")
                .replace("/gpu-a100-1", "/<name>").replace("/ml-vision", "/<project_id>")
                .replace("/whatif/nope", "/whatif/<job_id>")) for method, path in covered}
    routes = {(method, rule.rule) for rule in app.url_map.iter_rules() if rule.rule.startswith("/v1")
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert routes - covered == set()


def test_listings_show_a_project_only_its_own(client, lease_of_a, budget_of_a):
    assert client.get("/v1/budgets", headers=PERSONAS["member_b"]).get_json()["budgets"] == []
    assert [b["id"] for b in client.get("/v1/budgets", headers=PERSONAS["reader_a"]).get_json()["budgets"]] == [
        budget_of_a]
    leases_b = client.get("/v1/leases", headers=PERSONAS["member_b"]).get_json()["leases"]
    assert lease_of_a not in [lease["id"] for lease in leases_b]
    quotas_b = client.get("/v1/quotas", headers=PERSONAS["member_b"]).get_json()["quotas"]
    assert [q["project_id"] for q in quotas_b] == [B]
    usage_b = client.get("/v1/usage", headers=PERSONAS["member_b"]).get_json()["usage"]["projects"]
    assert [u["project_id"] for u in usage_b] == [B]


def test_a_reader_cannot_change_a_lease_it_can_see(client, lease_of_a):
    response = client.delete(f"/v1/leases/{lease_of_a}", headers=PERSONAS["reader_a"])
    assert response.status_code == 403
    shown = client.get(f"/v1/leases/{lease_of_a}", headers=PERSONAS["reader_a"]).get_json()["lease"]
    assert shown["status"] == "scheduled"

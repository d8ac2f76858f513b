"""/v1/openapi.json: valid OpenAPI 3.1, complete, and true to what the API answers."""
from __future__ import annotations

import re

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from gpu_tenancy.api import budgets, images, leases, policy, priority_classes, quotas, shapes
from tests.conftest import headers

ADMIN = headers("ml-vision", "admin")


@pytest.fixture
def document(client):
    response = client.get("/v1/openapi.json")  # public: no identity headers
    assert response.status_code == 200
    return response.get_json()


def test_the_document_is_valid_openapi_3_1(document):
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_and_method_is_documented(app, document):
    documented = {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/v1"):
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert (method, path) in documented, f"{method} {path} is not in the OpenAPI document"
            op = document["paths"][path][method.lower()]
            names = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert names == set(rule.arguments), f"{method} {path}: path parameters"


def test_every_documented_operation_exists(app, document):
    routes = {(method, re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule))
              for rule in app.url_map.iter_rules() for method in rule.methods}
    for path, ops in document["paths"].items():
        for method in ops:
            assert (method.upper(), path) in routes


def test_request_schemas_are_the_ones_the_api_validates_with(document):
    schemas = document["components"]["schemas"]
    assert schemas["LeaseCreate"] == leases.CREATE and schemas["LeaseUpdate"] == leases.UPDATE
    assert schemas["ShapeCreate"] == shapes.CREATE and schemas["ImageCreate"] == images.CREATE
    assert schemas["QuotaUpdate"] == quotas.UPDATE
    assert schemas["PriorityClassUpdate"] == priority_classes.UPDATE and schemas["BudgetCreate"] == budgets.CREATE


def test_every_documented_policy_is_a_registered_rule(document):
    registered = {rule.name for rule in policy.RULES}
    documented = {re.fullmatch(r".*Policy: ([a-z_:]+)\.", op.get("description", ""), re.S)
                  for ops in document["paths"].values() for op in ops.values()}
    names = {match.group(1) for match in documented if match}
    assert len(names) > 20 and names <= registered, names - registered


def test_security_and_error_responses(document):
    assert document["components"]["securitySchemes"]["keystone"] == {
        "type": "apiKey", "in": "header", "name": "X-Auth-Token", "description": "a project-scoped Keystone token"}
    error = document["components"]["schemas"]["Error"]["properties"]["errors"]["items"]
    assert set(error["required"]) == {"status", "code", "title", "detail", "request_id"}
    assert set(document["components"]["responses"]) == {"400", "401", "403", "404", "409", "413", "429", "503"}
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            if op.get("security") == []:
                assert path == "/v1/openapi.json"
                continue
            assert {"401", "403"} <= set(op["responses"]), f"{method} {path}"
            if "requestBody" in op:
                assert {"400", "413"} <= set(op["responses"]), f"{method} {path}"
            if "{" in path:
                # PUT makes a per-project resource that is not there yet
                assert "404" in op["responses"] or path.startswith(("/v1/quotas", "/v1/webhooks")), f"{method} {path}"


def response_validator(document, path, method, status):
    pointer = "/".join(p.replace("~", "~0").replace("/", "~1")
                       for p in ["#", "paths", path, method, "responses", str(status), "content",
                                 "application/json", "schema"])
    return Draft202012Validator({**document, "$ref": pointer})


@pytest.mark.parametrize("method, url, path, status, body", [
    ("post", "/v1/leases", "/v1/leases", 201, {"shape": "a100.x1", "duration": "PT1H", "name": "probe"}),
    ("get", "/v1/leases", "/v1/leases", 200, None),
    ("get", "/v1/shapes", "/v1/shapes", 200, None),
    ("get", "/v1/shapes/a100.x1", "/v1/shapes/{name}", 200, None),
    ("delete", "/v1/shapes/a100.x8", "/v1/shapes/{name}", 200, None),
    ("get", "/v1/images", "/v1/images", 200, None),
    ("get", "/v1/quotas", "/v1/quotas", 200, None),
    ("put", "/v1/quotas/ml-vision", "/v1/quotas/{project_id}", 200,
     {"quota": {"gpu_models": {"A100": {"gpus": 4, "max_duration": "P1D"}}}}),
    ("get", "/v1/capacity?start=2026-12-01T08:00:00Z&end=2026-12-02T08:00:00Z", "/v1/capacity", 200, None),
    ("get", "/v1/usage", "/v1/usage", 200, None),
    ("get", "/v1/priority_classes", "/v1/priority_classes", 200, None),
    ("put", "/v1/priority_classes/urgent", "/v1/priority_classes/{name}", 200,
     {"priority_class": {"priority": 50, "projects": ["ml-vision"], "description": "deadlines"}}),
    ("post", "/v1/budgets", "/v1/budgets", 201,
     {"budget": {"project_id": "ml-vision", "gpu_model": "A100", "gpu_hours": 100, "period": "range",
                 "start": "2026-12-01T00:00:00Z", "end": "2026-12-08T00:00:00Z"}}),
    ("get", "/v1/budgets", "/v1/budgets", 200, None),
])
def test_real_responses_match_the_documented_schemas(client, document, method, url, path, status, body):
    client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT2H"}, headers=ADMIN)
    client.post("/v1/budgets", json={"budget": {"project_id": "ml-vision", "gpu_model": "A100", "gpu_hours": 50,
                                                "period": "month"}}, headers=ADMIN)
    response = client.open(url, method=method.upper(), json=body, headers=ADMIN)
    assert response.status_code == status, response.get_json()
    response_validator(document, path, method, status).validate(response.get_json())
    if body is not None:
        Draft202012Validator({**document, "$ref": "#/paths/" + path.replace("/", "~1") + f"/{method}/requestBody/"
                              "content/application~1json/schema"}).validate(body)


def test_error_bodies_match_the_documented_error_form(client, document):
    response = client.get("/v1/shapes/nope", headers=ADMIN)
    assert response.status_code == 404
    Draft202012Validator({**document, "$ref": "#/components/schemas/Error"}).validate(response.get_json())

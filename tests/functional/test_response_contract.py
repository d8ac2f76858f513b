"""The response side of /v1/openapi.json is a contract: every documented answer
is a closed object (each key listed, each listed key present), the schemas take
their keys from the renderers' field lists, and every renderer's live answer,
in each of its forms, matches its schema exactly."""
from __future__ import annotations

import dataclasses

import pytest

from gpu_tenancy.api import audit, lease_view
from gpu_tenancy.api.openapi import REQUEST_SCHEMAS, build
from gpu_tenancy.api.response_schemas import closed
from gpu_tenancy.config import Config
from gpu_tenancy.engine import capacity
from tests.conftest import headers
from tests.functional.test_openapi import response_validator

ADMIN = headers("ml-vision", "admin")
MEMBER = headers("ml-vision", "member")


def response_schemas(document: dict) -> list[tuple[str, dict]]:
    """(where, schema) of every 2xx response schema of the document, with the component
    schemas they refer to (followed once each)."""
    found, seen = [], set()
    todo = [(f"{method.upper()} {path} {status}", content["schema"])
            for path, ops in document["paths"].items() for method, op in ops.items()
            for status, response in op["responses"].items() if status.startswith("2")
            for content in response.get("content", {}).values()]
    while todo:
        where, schema = todo.pop()
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                todo.append((name, document["components"]["schemas"][name]))
            continue
        found.append((where, schema))
        for key, value in schema.get("properties", {}).items():
            todo.append((f"{where}.{key}", value))
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                todo.append((f"{where}[]", schema[key]))
        for i, alternative in enumerate(schema.get("oneOf", [])):
            todo.append((f"{where}|{i}", alternative))
    return found


def test_every_documented_response_object_is_closed_and_lists_each_key_it_has():
    document = build()
    checked = response_schemas(document)
    assert len(checked) > 100
    for where, schema in checked:
        if "properties" in schema:
            assert schema.get("additionalProperties") is False, f"{where}: open to any key"
            assert sorted(schema["required"]) == sorted(schema["properties"]), f"{where}: optional keys"
        elif schema.get("type") == "object":
            # a map (quota per GPU model) or free-form data (an audit record's before): said so explicitly
            assert "additionalProperties" in schema, f"{where}: an object of unstated keys"


def test_request_schemas_are_not_response_schemas():
    document = build()
    referenced = {where for where, _ in response_schemas(document)}
    assert not referenced & set(REQUEST_SCHEMAS)


def test_the_schemas_take_their_keys_from_the_renderers_field_lists():
    schemas = build()["components"]["schemas"]
    assert tuple(schemas["Lease"]["properties"]) == lease_view.FIELDS
    assert tuple(schemas["NewLease"]["properties"]) == lease_view.FIELDS
    assert tuple(schemas["AuditRecord"]["properties"]) == audit.FIELDS
    per_model = schemas["Capacity"]["properties"]["gpu_models"]["additionalProperties"]
    assert list(per_model["properties"]) == [f.name for f in dataclasses.fields(capacity.ModelCapacity)]


def test_a_field_list_naming_a_key_without_a_schema_is_refused_when_the_document_is_built():
    with pytest.raises(ValueError, match="not the renderer's keys"):
        closed({"id": {"type": "string"}}, ("id", "added_later"))
    with pytest.raises(ValueError, match="not the renderer's keys"):
        closed({"id": {"type": "string"}, "dropped": {"type": "string"}}, ("id",))


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779")


def test_every_form_of_every_renderer_matches_its_documented_schema(client, engine_tick):
    """The answers test_openapi.py does not reach: a lease running (allocations,
    servers, readiness), asked with the probe (its secret shown once), previewed,
    changed, its events; pages with a next link; hosts, volumes, webhooks, capacity
    without a window, a budget in the usage."""
    document = build()

    def answer(method, url, path, status, body=None, who=ADMIN):
        response = client.open(url, method=method.upper(), json=body, headers=who)
        assert response.status_code == status, (url, response.get_json())
        response_validator(document, path, method, status).validate(response.get_json())
        return response.get_json()

    new = answer("post", "/v1/leases", "/v1/leases", 201,
                 {"shape": "a100.x2", "duration": "PT2H", "readiness_probe": True, "volume": {"size_gb": 10}})
    lease = new["lease"]
    assert {"url", "token"} <= set(lease["readiness"])
    answer("post", "/v1/leases", "/v1/leases", 201, {"shape": "a100.x8", "duration": "P2D", "instances": 2,
                                                     "name": "waits"})
    engine_tick()
    engine_tick(advance=30)
    running = answer("get", f"/v1/leases/{lease['id']}", "/v1/leases/{lease_id}", 200)["lease"]
    assert running["status"] == "active" and running["servers"] and running["allocations"]
    answer("post", f"/v1/leases/{lease['id']}/readiness", "/v1/leases/{lease_id}/readiness", 200,
           {"instance": 0, "ok": True, "detail": "2 GPUs"}, who={"X-Lease-Token": lease["readiness"]["token"]})
    answer("patch", f"/v1/leases/{lease['id']}", "/v1/leases/{lease_id}", 200, {"duration": "PT1H", "shrink": True})
    answer("get", f"/v1/leases/{lease['id']}/events", "/v1/leases/{lease_id}/events", 200)
    guest = {"X-Lease-Token": lease["readiness"]["token"]}
    use = {"instance": 0, "gpus": [{"index": 0, "utilization": 40, "memory_used_mib": 512}]}
    answer("post", f"/v1/leases/{lease['id']}/utilization", "/v1/leases/{lease_id}/utilization", 200, use, who=guest)
    answer("post", f"/v1/leases/{lease['id']}/done", "/v1/leases/{lease_id}/done", 200, {"instance": 0}, who=guest)
    preview = answer("post", "/v1/leases?dry_run=true", "/v1/leases", 200,
                     {"shape": "a100.x8", "duration": "P1D", "name": "what if"})
    assert preview["lease"]["queue"]["reasons"]
    page = answer("get", "/v1/leases?limit=1&all_projects=true", "/v1/leases", 200)
    assert "leases_links" in page
    answer("get", "/v1/audit?limit=1", "/v1/audit", 200)
    answer("get", "/v1/hosts", "/v1/hosts", 200)
    host = client.get("/v1/hosts", headers=ADMIN).get_json()["hosts"][0]["name"]
    answer("patch", f"/v1/hosts/{host}", "/v1/hosts/{name}", 200, {"drained": True})
    answer("get", f"/v1/hosts/{host}", "/v1/hosts/{name}", 200)
    answer("get", "/v1/volumes", "/v1/volumes", 200, who=MEMBER)
    answer("put", "/v1/webhooks/ml-vision", "/v1/webhooks/{project_id}", 200,
           {"webhook": {"url": "https://hooks.example.org/gpu"}})
    answer("get", "/v1/webhooks/ml-vision", "/v1/webhooks/{project_id}", 200)
    answer("get", "/v1/capacity", "/v1/capacity", 200)
    answer("get", "/v1/images/ubuntu-22.04-cuda-12", "/v1/images/{name}", 200)
    answer("post", "/v1/budgets", "/v1/budgets", 201, {"budget": {"project_id": "ml-vision", "gpu_model": "A100",
                                                                  "gpu_hours": 100, "period": "month"}})
    usage = answer("get", "/v1/usage", "/v1/usage", 200)
    assert usage["usage"]["projects"] and usage["usage"]["projects"][0]["budgets"]
    answer("get", "/v1/priority_classes", "/v1/priority_classes", 200)

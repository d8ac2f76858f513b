"""/v1/openapi.json: the API described in OpenAPI 3.1, built from the request
schemas that live beside each endpoint module (so the document and the
validation cannot drift apart). Public: no token needed to read it."""
from __future__ import annotations

import functools

from flask import Blueprint

from gpu_tenancy import __version__
from gpu_tenancy.api import audit, hosts, images, leases, quotas, shapes
from gpu_tenancy.api.capacity import MAX_CALENDAR_SPAN
from gpu_tenancy.api.usage import DEFAULT_SPAN

bp = Blueprint("openapi", __name__, url_prefix="/v1")

ERROR_STATUSES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                  409: "Conflict", 413: "Content Too Large"}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict) -> dict:
    return {"oneOf": [schema, {"type": "null"}]}


TIME = {"type": "string", "format": "date-time"}
LINKS = {"type": "array", "items": {"type": "object", "required": ["rel", "href"],
                                    "properties": {"rel": {"type": "string"}, "href": {"type": "string"}}}}
RETIREMENT = {"created_at": TIME, "retired_at": nullable(TIME), "links": LINKS}

SCHEMAS = {
    "Error": {
        "type": "object", "required": ["errors"],
        "description": "OpenStack API-WG error form",
        "properties": {"errors": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["status", "code", "title", "detail", "request_id"],
            "properties": {"status": {"type": "integer"}, "code": {"type": "string"}, "title": {"type": "string"},
                           "detail": {"type": "string"},
                           "request_id": {"type": "string", "description": "as in X-OpenStack-Request-Id"}}}}}},
    "LeaseCreate": leases.CREATE,
    "LeaseUpdate": leases.UPDATE,
    "Lease": {"type": "object", "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}, "project_id": {"type": "string"},
        "user_id": {"type": "string"}, "status": {"type": "string", "enum": leases.STATUSES},
        "shape": {"type": "string"}, "gpu_model": {"type": "string"}, "gpus_per_instance": {"type": "integer"},
        "instances": {"type": "integer"}, "requested_start": TIME, "latest_start": nullable(TIME),
        "duration": {"type": "integer", "description": "seconds"}, "start": nullable(TIME), "end": nullable(TIME),
        "priority": {"type": "integer"}, "borrowing": {"type": "boolean"}, "image": nullable({"type": "string"}),
        "volume": nullable({"type": "object"}), "key_name": nullable({"type": "string"}),
        "queue": nullable({"type": "object", "description": "for a waiting lease: its position, ETA and why it waits",
                           "properties": {"position": nullable({"type": "integer"}), "eta": nullable(TIME),
                                          "reasons": {"type": "array", "items": {"type": "object"}}}}),
        "allocations": {"type": "array", "items": {"type": "object"}},
        "servers": {"type": "array", "items": {"type": "object"}},
        "failure": nullable({"type": "object", "properties": {"class": {"type": "string"},
                                                              "message": {"type": "string"}}}),
        "created_at": TIME, "updated_at": TIME, "links": LINKS}},
    "LeasePreview": {"type": "object", "description": "what POST /v1/leases?dry_run=true would give; nothing "
                                                     "is created", "properties": {
        "id": {"type": "null"}, "name": nullable({"type": "string"}), "status": {"const": "preview"},
        "shape": {"type": "string"}, "gpu_model": {"type": "string"}, "gpus_per_instance": {"type": "integer"},
        "instances": {"type": "integer"}, "duration": {"type": "integer", "description": "seconds"},
        "image": nullable({"type": "string"}), "start": nullable(TIME), "end": nullable(TIME),
        "borrowing": {"type": "boolean"},
        "queue": {"type": "object", "properties": {"position": nullable({"type": "integer"}), "eta": nullable(TIME),
                                                   "reasons": {"type": "array", "items": {"type": "object"}}}},
        "allocations": {"type": "array", "items": {"type": "object"}}}},
    "Event": {"type": "object", "properties": {
        "at": TIME, "actor": {"type": "string"}, "kind": {"type": "string"}, "from": nullable({"type": "string"}),
        "to": nullable({"type": "string"}), "message": {"type": "string"}}},
    "ShapeCreate": shapes.CREATE,
    "Shape": {"type": "object", "properties": {
        **shapes.CREATE["properties"], **RETIREMENT}},
    "ImageCreate": images.CREATE,
    "Image": {"type": "object", "properties": {**images.CREATE["properties"], **RETIREMENT}},
    "QuotaUpdate": quotas.UPDATE,
    "Quota": {"type": "object", "required": ["project_id", "gpu_models"], "properties": {
        "project_id": {"type": "string"},
        "gpu_models": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "gpus": {"type": "integer"}, "borrow_gpus": {"type": "integer"},
            "max_duration": nullable({"type": "integer", "description": "seconds"}),
            "weight": {"type": "number"}}}}}},
    "Capacity": {"type": "object", "required": ["now", "gpu_models"], "properties": {
        "now": TIME,
        "gpu_models": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "hosts": {"type": "integer"},
            "hosts_in_service": {"type": "integer", "description": "enabled, up and not drained"},
            "gpus": {"type": "integer", "description": "on all hosts of the model"},
            "in_use": {"type": "integer", "description": "held by leases now"},
            "free": {"type": "integer", "description": "free now on hosts in service"},
            "largest_free_block": {"type": "integer", "description": "most GPUs free now on one host in service"},
            "waiting_leases": {"type": "integer"}}}},
        "calendar": {"type": "array", "description": "only with start and end", "items": {
            "type": "object", "properties": {
                "host": {"type": "string"}, "gpu_model": {"type": "string"}, "gpus": {"type": "integer"},
                "in_service": {"type": "boolean"},
                "free": {"type": "array", "description": "free GPUs as steps covering [start, end)", "items": {
                    "type": "object", "properties": {"from": TIME, "to": TIME, "free": {"type": "integer"}}}}}}}}},
    "HostUpdate": hosts.UPDATE,
    "Host": {"type": "object", "properties": {
        "name": {"type": "string"}, "gpu_model": {"type": "string"}, "gpus": {"type": "integer"},
        "in_use": {"type": "integer", "description": "GPUs held by leases now"},
        "up": {"type": "boolean", "description": "Nova's service state"},
        "enabled": {"type": "boolean", "description": "Nova's service status"},
        "drained": {"type": "boolean", "description": "set by an admin: no new leases"},
        "in_service": {"type": "boolean", "description": "up, enabled and not drained: takes new leases"},
        "aggregate": nullable({"type": "string"}), "reported_at": TIME}},
    "AuditRecord": {"type": "object", "required": list(audit.FIELDS), "properties": {
        "id": {"type": "integer"}, "at": TIME, "user_id": nullable({"type": "string"}),
        "user_project_id": nullable({"type": "string", "description": "the project of the caller's token"}),
        "request_id": nullable({"type": "string", "description": "as in X-OpenStack-Request-Id"}),
        "remote_address": nullable({"type": "string",
                                    "description": "the first hop of X-Forwarded-For, else the peer"}),
        "action": {"type": "string", "enum": list(audit.ACTIONS)},
        "target_type": {"type": "string"}, "target_id": {"type": "string"},
        "target_project_id": nullable({"type": "string"}),
        "before": nullable({"type": "object", "description": "the resource as the API showed it before"}),
        "after": nullable({"type": "object", "description": "the resource as the API showed it after"}),
        "outcome": {"type": "string"}}},
    "Usage": {"type": "object", "required": ["start", "end", "projects"], "properties": {
        "start": TIME, "end": TIME,
        "projects": {"type": "array", "items": {"type": "object", "properties": {
            "project_id": {"type": "string"},
            "gpu_models": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"gpu_hours": {"type": "number"}}}}}}}}},
}


def wrapped(key: str, schema_name: str, many: bool = False, extra: dict | None = None) -> dict:
    inner = {"type": "array", "items": ref(schema_name)} if many else ref(schema_name)
    return {"type": "object", "required": [key], "properties": {key: inner, **(extra or {})}}


def param(name: str, where: str, description: str, schema: dict | None = None, required: bool = False) -> dict:
    return {"name": name, "in": where, "description": description, "required": required or where == "path",
            "schema": schema or {"type": "string"}}


def path_param(name: str, description: str) -> dict:
    return param(name, "path", description)


BOOL = {"type": "string", "enum": ["true", "false", "1", "0"]}
LEASE_ID = path_param("lease_id", "the lease's id")
ENTRY = path_param("name", "the entry's name")
PROJECT_ID = path_param("project_id", "a Keystone project id")
PROJECT_FILTER = param("project_id", "query", "one project (another project than one's own: admins only)")
WINDOW = [param("start", "query", "RFC 3339 time", TIME), param("end", "query", "RFC 3339 time, after start", TIME)]


def operation(summary: str, policy: str | None, ok: int, ok_schema: dict | None, *,
              params: list[dict] = (), body: str | None = None, errors: tuple[int, ...] = (),
              description: str | None = None) -> dict:
    """One operation; `policy` None is public. 401 and 403 follow from the policy,
    400 from parameters or a body, 413 from a body."""
    codes = set(errors)
    if policy is not None:
        codes |= {401, 403}
    if params or body:
        codes.add(400)
    if body:
        codes.add(413)
    ok_response = {"description": "success"}
    if ok_schema is not None:
        ok_response["content"] = {"application/json": {"schema": ok_schema}}
    op = {"summary": summary, "operationId": None, "parameters": list(params),
          "responses": {str(ok): ok_response,
                        **{str(c): {"$ref": f"#/components/responses/{c}"} for c in sorted(codes)}}}
    if description or policy:
        op["description"] = " ".join(filter(None, [description, f"Policy: {policy}." if policy else None]))
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(body)}}}
    if policy is None:
        op["security"] = []
    return op


def audit_operation() -> dict:
    op = operation(
        "The audit record: changes made through the API", "audit:list", 200,
        wrapped("audit_records", "AuditRecord", many=True, extra={"audit_records_links": LINKS}), params=[
            param("action", "query", "only these actions (repeatable)",
                  {"type": "array", "items": {"type": "string", "enum": list(audit.ACTIONS)}}),
            param("user_id", "query", "only changes by this user"),
            param("project_id", "query", "only changes to this project's resources"),
            param("target_id", "query", "only changes to this resource (lease id, shape or image name, "
                                        "project id of a quota)"),
            param("since", "query", "RFC 3339 time, inclusive", TIME),
            param("until", "query", "RFC 3339 time, exclusive", TIME),
            param("limit", "query", "page size", {"type": "integer", "minimum": 1}),
            param("marker", "query", "the last record id of the previous page"),
            param("format", "query", "json (the default) or csv",
                  {"type": "string", "enum": list(audit.FORMATS)})],
        description="Oldest first. Refused requests change nothing and are not recorded; the engine's own "
                    "lease actions are in each lease's events. With format=csv: a header row, before and "
                    "after as JSON text, and the next page in the Link header.")
    op["responses"]["200"]["content"]["text/csv"] = {"schema": {"type": "string"}}
    return op


def create_lease_operation() -> dict:
    op = operation("Ask for a lease", "lease:create", 201, wrapped("lease", "Lease"), body="LeaseCreate",
                   params=[param("dry_run", "query", "plan without creating: answers 200 with a "
                                                     "preview of position, ETA and reasons", BOOL)],
                   errors=(409,))
    op["responses"] = {"200": {"description": "with dry_run: the preview",
                               "content": {"application/json": {"schema": wrapped("lease", "LeasePreview")}}},
                       **op["responses"]}
    return op


def catalog_paths(kind: str, title: str) -> dict:
    """/v1/shapes and /v1/images have the same form."""
    cap = kind.capitalize()
    return {
        f"/v1/{kind}s": {
            "get": operation(f"List the {title}", f"{kind}:list", 200, wrapped(f"{kind}s", cap, many=True),
                             params=[param("include_retired", "query",
                                           f"also retired entries (needs {kind}:manage)", BOOL)]),
            "post": operation(f"Add to the {title}", f"{kind}:manage", 201, wrapped(kind, cap),
                              body=f"{cap}Create", errors=(409,)),
        },
        f"/v1/{kind}s/{{name}}": {
            "get": operation(f"Show an entry of the {title}", f"{kind}:list", 200, wrapped(kind, cap),
                             params=[ENTRY], errors=(404,)),
            "delete": operation(f"Retire an entry of the {title}", f"{kind}:manage", 200,
                                wrapped(kind, cap, extra={"message": {"type": "string"}}),
                                params=[ENTRY], errors=(404, 409),
                                description="New leases can no longer choose it; leases that use it keep it "
                                            "until they end."),
        },
    }


PATHS = {
    "/v1/leases": {
        "get": operation("List leases", "lease:list", 200,
                         wrapped("leases", "Lease", many=True, extra={"leases_links": LINKS}), params=[
                             param("limit", "query", "page size", {"type": "integer", "minimum": 1}),
                             param("marker", "query", "the last lease id of the previous page"),
                             param("status", "query", "only leases in these states (repeatable)",
                                   {"type": "array", "items": {"type": "string", "enum": leases.STATUSES}}),
                             PROJECT_FILTER,
                             param("all_projects", "query", "every project's leases (admins)", BOOL)]),
        "post": create_lease_operation(),
    },
    "/v1/leases/{lease_id}": {
        "get": operation("Show a lease", "lease:show", 200, wrapped("lease", "Lease"), params=[LEASE_ID],
                         errors=(404,)),
        "patch": operation("Extend or shorten a lease", "lease:update", 200, wrapped("lease", "Lease"),
                           params=[LEASE_ID], body="LeaseUpdate", errors=(404, 409)),
        "delete": operation("Cancel a waiting lease, or end a running one now", "lease:delete", 204, None,
                            params=[LEASE_ID], errors=(404, 409),
                            description="The data volume is never deleted."),
    },
    "/v1/leases/{lease_id}/events": {
        "get": operation("A lease's history", "lease:show", 200, wrapped("events", "Event", many=True),
                         params=[LEASE_ID], errors=(404,)),
    },
    **catalog_paths("shape", "shapes on offer"),
    **catalog_paths("image", "standard image catalog"),
    "/v1/quotas": {
        "get": operation("Quotas of every project (admins), or of one", "quota:show", 200,
                         wrapped("quotas", "Quota", many=True), params=[PROJECT_FILTER]),
    },
    "/v1/quotas/{project_id}": {
        "get": operation("A project's quotas", "quota:show", 200, wrapped("quota", "Quota"), params=[PROJECT_ID]),
        "put": operation("Set a project's quotas for the GPU models given", "quota:update", 200,
                         wrapped("quota", "Quota"), params=[PROJECT_ID], body="QuotaUpdate",
                         description="max_duration accepts seconds or ISO 8601 (P7D). Waiting leases are "
                                     "replanned at once."),
    },
    "/v1/capacity": {
        "get": operation("GPUs per model now, and with start and end each host's free GPUs over time",
                         "capacity:show", 200, wrapped("capacity", "Capacity"), params=WINDOW,
                         description=f"start and end come together; at most {MAX_CALENDAR_SPAN // 86400} days "
                                     "apart."),
    },
    "/v1/usage": {
        "get": operation("GPU-hours per project and GPU model", "usage:show", 200, wrapped("usage", "Usage"),
                         params=[*WINDOW, PROJECT_FILTER],
                         description=f"Default: the {DEFAULT_SPAN // 86400} days up to now; time after now "
                                     "does not count. Admins see every project unless they name one."),
    },
    "/v1/hosts": {
        "get": operation("The GPU hosts, their state and GPUs in use", "host:list", 200,
                         wrapped("hosts", "Host", many=True)),
    },
    "/v1/hosts/{name}": {
        "get": operation("A GPU host", "host:list", 200, wrapped("host", "Host"),
                         params=[path_param("name", "the host's name")], errors=(404,)),
        "patch": operation("Drain a GPU host, or undrain it", "host:update", 200, wrapped("host", "Host"),
                           params=[path_param("name", "the host's name")], body="HostUpdate", errors=(404,),
                           description="A drained host takes no new leases; the leases already placed "
                                       "there keep their place. Waiting leases are replanned at once."),
    },
    "/v1/audit": {"get": audit_operation()},
    "/v1/openapi.json": {
        "get": operation("This document", None, 200, {"type": "object"}),
    },
}


def with_operation_ids(paths: dict) -> dict:
    for path, methods in paths.items():
        for method, op in methods.items():
            words = [w.strip("{}").replace(".", "_") for w in path.split("/")[2:]]
            op["operationId"] = "_".join([method, *words])
    return paths


@functools.cache
def build() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpu-tenancy", "version": __version__,
                 "description": "Lease passthrough GPUs of an OpenStack cloud: a fair, explainable queue, "
                                "quotas per project and GPU model, and training VMs booted when a lease starts."},
        "servers": [{"url": "/"}],
        "security": [{"keystone": []}],
        "paths": with_operation_ids(PATHS),
        "components": {
            "securitySchemes": {"keystone": {"type": "apiKey", "in": "header", "name": "X-Auth-Token",
                                             "description": "a project-scoped Keystone token"}},
            "schemas": SCHEMAS,
            "responses": {str(code): {"description": title, "headers": {
                "X-OpenStack-Request-Id": {"schema": {"type": "string"}}},
                "content": {"application/json": {"schema": ref("Error")}}}
                for code, title in ERROR_STATUSES.items()},
        },
    }


@bp.get("/openapi.json", endpoint="document")
def document():
    return build()

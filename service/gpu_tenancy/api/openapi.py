"""/v1/openapi.json: the API described in OpenAPI 3.1, built from the request
schemas that live beside each endpoint module (so the document and the
validation cannot drift apart). Public: no token needed to read it."""
from __future__ import annotations

import functools

from flask import Blueprint

from gpu_tenancy import __version__
from gpu_tenancy.api import (audit, budgets, hosts, images, leases, priority_classes, quotas, readiness, shapes,
                             webhooks)
from gpu_tenancy.api.capacity import MAX_CALENDAR_SPAN
from gpu_tenancy.api.usage import DEFAULT_SPAN
from gpu_tenancy.domain.failures import FailureClass, Retry

bp = Blueprint("openapi", __name__, url_prefix="/v1")

ERROR_STATUSES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                  409: "Conflict", 413: "Content Too Large", 503: "Service Unavailable"}


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
        "priority": {"type": "integer"}, "priority_class": nullable({"type": "string"}),
        "preemptible": {"type": "boolean"}, "borrowing": {"type": "boolean"},
        "early_end": nullable({"type": "object", "description": "set when the lease is reclaimed or preempted: "
                                                                "kind, the time it ends at, for which lease, why"}),
        "image": nullable({"type": "string"}),
        "volume": nullable({"type": "object"}), "key_name": nullable({"type": "string"}),
        "queue": nullable({"type": "object", "description": "for a waiting lease: its position, ETA and why it waits",
                           "properties": {"position": nullable({"type": "integer"}), "eta": nullable(TIME),
                                          "reasons": {"type": "array", "items": {"type": "object"}}}}),
        "allocations": {"type": "array", "items": {"type": "object"}},
        "servers": {"type": "array", "items": {"type": "object"}},
        "ready": {"type": "boolean", "description": "active, and every VM reported its GPUs usable when the "
                                                    "lease asked for the readiness probe"},
        "readiness": nullable(ref("Readiness")),
        "failure": nullable({"type": "object", "properties": {"class": {"type": "string"},
                                                              "message": {"type": "string"}}}),
        "failures": {"type": "array", "description": "the lease's failure history: every failed attempt, "
                     "classified, and what the engine did (retried elsewhere, re-placed off a down host, failed)",
                     "items": {"type": "object", "required": ["at", "attempt", "class", "message", "action"],
                               "properties": {
                                   "at": TIME, "attempt": {"type": "integer"},
                                   "class": {"type": "string", "enum": [c.value for c in FailureClass]},
                                   "message": {"type": "string", "description": "what failed, the cloud's words kept"},
                                   "user_message": {"type": "string"}, "operator_hint": {"type": "string"},
                                   "retry": {"type": "string", "enum": [r.value for r in Retry]},
                                   "hosts": {"type": "array", "items": {"type": "string"}},
                                   "action": {"type": "string", "enum": ["retried", "replaced", "failed"]},
                                   "retry_at": nullable(TIME)}}},
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
    "ReadinessReport": readiness.REPORT,
    "Readiness": {"type": "object", "required": ["status", "instances"], "properties": {
        "status": {"type": "string", "enum": ["waiting", "ready", "failed"]},
        "instances": {"type": "array", "items": {"type": "object", "properties": {
            "instance": {"type": "integer"}, "status": {"type": "string", "enum": ["waiting", "ready", "failed"]},
            "detail": nullable({"type": "string"}), "reported_at": nullable(TIME)}}},
        "url": {"type": "string", "description": "where the VMs report; only in the answer to POST /v1/leases"},
        "token": {"type": "string", "description": "the lease's secret (X-Lease-Token), for VMs made otherwise "
                                                   "(heat_templates/); only in the answer to POST /v1/leases"}}},
    "Event": {"type": "object", "properties": {
        "at": TIME, "actor": {"type": "string"}, "kind": {"type": "string"}, "from": nullable({"type": "string"}),
        "to": nullable({"type": "string"}), "message": {"type": "string"}}},
    "ShapeCreate": shapes.CREATE,
    "Shape": {"type": "object", "properties": {
        **shapes.CREATE["properties"], **RETIREMENT}},
    "ImageCreate": images.CREATE,
    "Image": {"type": "object", "properties": {**images.CREATE["properties"], **RETIREMENT}},
    "QuotaUpdate": quotas.UPDATE,
    "WebhookUpdate": webhooks.UPDATE,
    "Webhook": {"type": "object", "required": ["project_id", "url", "events"], "properties": {
        "project_id": {"type": "string"}, "url": {"type": "string"},
        "events": {"type": "array", "items": {"type": "string"}},
        "signature": {"type": "string", "description": "how each POST is signed"},
        "secret": {"type": "string", "description": "only in the answer to PUT"},
        "recent_deliveries": {"type": "array", "items": {"type": "object"},
                              "description": "admins only: the last 20 deliveries, with why they failed"},
        "created_at": TIME, "updated_at": TIME}},
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
        "held_until": nullable({**TIME, "description": "the end of the last lease holding GPUs there: a "
                                                       "drained host is empty then"}),
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
    "Volume": {"type": "object", "required": ["id", "status", "free_for_a_lease"], "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}, "size_gb": {"type": "integer"},
        "status": {"type": "string", "description": "Cinder's: available, in-use, creating, error, ..."},
        "attached_to": {"type": "array", "items": {"type": "string"}, "description": "server ids"},
        "made_by_lease": nullable({"type": "string", "description": "the lease that made it, if one did"}),
        "lease_id": nullable({"type": "string", "description": "the unfinished lease it is the data volume of"}),
        "free_for_a_lease": {"type": "boolean", "description": "available, and no unfinished lease names it"}}},
    "Usage": {"type": "object", "required": ["start", "end", "projects"], "properties": {
        "start": TIME, "end": TIME,
        "projects": {"type": "array", "items": {"type": "object", "properties": {
            "project_id": {"type": "string"},
            "gpu_models": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"gpu_hours": {"type": "number"}}}},
            "budgets": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "gpu_model": {"type": "string"}, "gpu_hours": {"type": "number"},
                "period": {"type": "string"}, "current": nullable(ref("BudgetUse"))}}}}}}}},
    "PriorityClassUpdate": priority_classes.UPDATE,
    "PriorityClass": {"type": "object", "required": ["name", "priority", "preemptible", "projects"], "properties": {
        "name": {"type": "string"}, **priority_classes.FIELDS["properties"], "updated_at": TIME, "links": LINKS}},
    "BudgetCreate": budgets.CREATE,
    "BudgetUse": {"type": "object", "description": "GPU-hours of the period that holds now", "properties": {
        "start": TIME, "end": TIME, "used": {"type": "number", "description": "before now"},
        "planned": {"type": "number", "description": "held, committed or asked for after now"},
        "left": {"type": "number"}}},
    "Budget": {"type": "object", "required": ["id", "project_id", "gpu_model", "gpu_hours", "period"], "properties": {
        "id": {"type": "string"}, "project_id": {"type": "string"}, "gpu_model": {"type": "string"},
        "gpu_hours": {"type": "number"}, "period": {"type": "string", "enum": ["month", "range"]},
        "start": nullable(TIME), "end": nullable(TIME), "created_at": TIME, "current": nullable(ref("BudgetUse")),
        "links": LINKS}},
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
BUDGET_ID = path_param("budget_id", "the budget's id")
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


def readiness_operation() -> dict:
    op = operation("A lease's VM reports its GPU readiness", "lease:readiness:report", 200,
                   wrapped("readiness", "Readiness"), params=[LEASE_ID], body="ReadinessReport",
                   errors=(404, 409), description="Sent by the probe the VM runs at first boot, with the "
                   "lease's secret from its user data instead of a Keystone token. A later report of the "
                   "same VM replaces the earlier.")
    op["security"] = [{"lease_token": []}]
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
    "/v1/leases/{lease_id}/readiness": {"post": readiness_operation()},
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
    "/v1/priority_classes": {
        "get": operation("List the priority classes, highest first", "priority_class:list", 200,
                         wrapped("priority_classes", "PriorityClass", many=True)),
    },
    "/v1/priority_classes/{name}": {
        "get": operation("Show a priority class", "priority_class:list", 200, wrapped("priority_class", "PriorityClass"),
                         params=[ENTRY], errors=(404,)),
        "put": operation("Create or replace a priority class", "priority_class:manage", 200,
                         wrapped("priority_class", "PriorityClass"), params=[ENTRY], body="PriorityClassUpdate",
                         errors=(404,), description="Leases already asked for keep the priority they copied."),
        "delete": operation("Remove a priority class", "priority_class:manage", 204, None, params=[ENTRY],
                            errors=(404,), description="Leases already asked for keep the priority they copied."),
    },
    "/v1/budgets": {
        "get": operation("GPU-hour budgets of every project (admins), or of one, with their use now", "budget:show",
                         200, wrapped("budgets", "Budget", many=True), params=[PROJECT_FILTER]),
        "post": operation("Set a GPU-hour budget for a project and GPU model", "budget:manage", 201,
                          wrapped("budget", "Budget"), body="BudgetCreate",
                          description="A lease that would pass it is refused when asked for, with the figures."),
    },
    "/v1/budgets/{budget_id}": {
        "get": operation("Show a budget and its use now", "budget:show", 200, wrapped("budget", "Budget"),
                         params=[BUDGET_ID], errors=(404,)),
        "delete": operation("Remove a budget", "budget:manage", 204, None, params=[BUDGET_ID], errors=(404,)),
    },
    "/v1/webhooks/{project_id}": {
        "get": operation("Where a project's lease notices are POSTed", "webhook:show", 200,
                         wrapped("webhook", "Webhook"), params=[PROJECT_ID], errors=(404,)),
        "put": operation("Set a project's webhook", "webhook:update", 200, wrapped("webhook", "Webhook"),
                         params=[PROJECT_ID], body="WebhookUpdate",
                         description="Notices: lease.ending_soon, warn_before_end_seconds before a lease's end. "
                                     "Each POST carries X-GPU-Tenancy-Signature: sha256=<HMAC-SHA256 of "
                                     "'<X-GPU-Tenancy-Timestamp>.<body>' with the secret>; failed deliveries "
                                     "are retried with a doubling backoff, and not redirected. A URL whose host is a loopback, "
                                     "link-local, private or other non-global address is refused (400) unless "
                                     "its network is in webhook_allowed_networks. The answer shows the secret, once."),
        "delete": operation("Remove a project's webhook", "webhook:update", 204, None, params=[PROJECT_ID],
                            errors=(404,)),
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
    "/v1/volumes": {
        "get": operation("A project's volumes, as the cloud has them", "volume:list", 200,
                         wrapped("volumes", "Volume", many=True, extra={"project_id": {"type": "string"}}),
                         params=[PROJECT_FILTER], errors=(503,),
                         description="Those free for a lease can be named in a new lease's volume.id. "
                                     "503 when the cloud does not answer."),
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
                           description="A drained host takes no new leases; the leases running there run to their "
                                       "end, and those only planned there are planned again on other hosts "
                                       "(each told in its events). Waiting leases are replanned at once."),
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
                                             "description": "a project-scoped Keystone token"},
                                "lease_token": {"type": "apiKey", "in": "header", "name": readiness.TOKEN_HEADER,
                                                "description": "a lease's secret, in its VMs' user data"}},
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

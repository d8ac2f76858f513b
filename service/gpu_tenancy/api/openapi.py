"""/v1/openapi.json: the API described in OpenAPI 3.1, built from the request
schemas that live beside each endpoint module (so the document and the
validation cannot drift apart) and the closed response schemas of
api/response_schemas.py. Public: no token needed to read it."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy import __version__
from gpu_tenancy.api import (audit, budgets, hosts, images, lease_agent, leases, priority_classes, quotas,
                             readiness, response_schemas, shapes, webhooks, whatif)
from gpu_tenancy.api.blazar import schemas as blazar_schemas
from gpu_tenancy.api.capacity import MAX_CALENDAR_SPAN
from gpu_tenancy.api.response_schemas import LINKS, TIME, closed, free_form, ref
from gpu_tenancy.api.usage import CSV_FIELDS, DEFAULT_SPAN, FORMATS
from gpu_tenancy.engine import gpu_activity, whatif_history
from gpu_tenancy.engine import readiness as readiness_reports

bp = Blueprint("openapi", __name__, url_prefix="/v1")

ERROR_STATUSES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                  409: "Conflict", 413: "Content Too Large", 429: "Too Many Requests",
                  503: "Service Unavailable"}


REQUEST_SCHEMAS = {
    "LeaseCreate": leases.CREATE,
    "LeaseUpdate": leases.UPDATE,
    "ReadinessReport": readiness.REPORT,
    "DoneReport": lease_agent.DONE,
    "UtilizationReport": lease_agent.UTILIZATION,
    "ShapeCreate": shapes.CREATE,
    "ImageCreate": images.CREATE,
    "QuotaUpdate": quotas.UPDATE,
    "QuotaChange": quotas.CHANGE,
    "WebhookUpdate": webhooks.UPDATE,
    "HostUpdate": hosts.UPDATE,
    "PriorityClassUpdate": priority_classes.UPDATE,
    "BudgetCreate": budgets.CREATE,
    "WhatIfCreate": whatif.CREATE,
}
SCHEMAS = {**REQUEST_SCHEMAS, **response_schemas.SCHEMAS, **blazar_schemas.SCHEMAS}


def wrapped(key: str, schema_name: str, many: bool = False, extra: dict | None = None) -> dict:
    inner = {"type": "array", "items": ref(schema_name)} if many else ref(schema_name)
    return closed({key: inner, **(extra or {})})


def paged(key: str, schema_name: str) -> dict:
    """A page of a listing: with `<key>_links` (the next page) only when another follows."""
    return {"oneOf": [wrapped(key, schema_name, many=True),
                      wrapped(key, schema_name, many=True, extra={f"{key}_links": LINKS})]}


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
GPU_MODEL_FILTER = param("gpu_model", "query", "only this GPU model", {"type": "string", "maxLength": 64})
WINDOW = [param("start", "query", "RFC 3339 time", TIME), param("end", "query", "RFC 3339 time, after start", TIME)]


def operation(summary: str, policy: str | None, ok: int, ok_schema: dict | None, *,
              params: Sequence[dict] = (), body: str | None = None, errors: tuple[int, ...] = (),
              description: str | None = None) -> dict:
    """One operation; `policy` None is public. 401 and 403 follow from the policy,
    413 from a body; 400 from any request, with or without parameters: every route
    refuses a NUL in its query string and an unprintable value in its path (app.py)."""
    codes = set(errors) | {400}
    if policy is not None:
        codes |= {401, 403}
    if body:
        codes.add(413)
    ok_response: dict[str, Any] = {"description": "success"}
    if ok_schema is not None:
        ok_response["content"] = {"application/json": {"schema": ok_schema}}
    op: dict[str, Any] = {"summary": summary, "operationId": None, "parameters": list(params),
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
        paged("audit_records", "AuditRecord"), params=[
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


def usage_operation() -> dict:
    op = operation("GPU-hours per project, user and GPU model, rated with the operator's prices",
                   "usage:show", 200, wrapped("usage", "Usage"),
                   params=[*WINDOW, PROJECT_FILTER,
                           param("format", "query", "json (the default) or csv: a row per project, user "
                                 "and GPU model (" + ", ".join(CSV_FIELDS) + ")",
                                 {"type": "string", "enum": list(FORMATS)})],
                   description=f"Default: the {DEFAULT_SPAN // 86400} days up to now; time after now "
                               "does not count. Admins see every project unless they name one. A GPU "
                               "model with a price per GPU-hour (the usage_prices setting) is rated; "
                               "rated is null where none is set.")
    op["responses"]["200"]["content"]["text/csv"] = {"schema": {"type": "string"}}
    return op


def create_lease_operation() -> dict:
    offers = {"offers": {"type": "array", "maxItems": 5, "items": ref("Offer"),
                         "description": "when the lease would wait (or waits): the alternatives, soonest first, "
                                        "the planned start reserved last; empty otherwise"}}
    op = operation("Ask for a lease", "lease:create", 201, wrapped("lease", "NewLease", extra=offers),
                   body="LeaseCreate",
                   params=[param("dry_run", "query", "plan without creating: answers 200 with a "
                                                     "preview of position, ETA and reasons, and the offers "
                                                     "when it would wait", BOOL)],
                   errors=(409, 429, 503),
                   description="The service's limits come before the quota (README: Security): a duration "
                               "of at most max_lease_duration_days (90 by default), a start and latest_start "
                               "at most max_start_ahead_days ahead (365); 403 with the count when the project "
                               "or the user has max_waiting_leases_per_project or _per_user leases waiting "
                               "(100, 30); with dry_run, 429 with Retry-After past max_dry_runs_per_minute (20) "
                               "of the project's dry runs in the last 60 s, in each API process (each plans the "
                               "whole queue). A volume.id must be one of the project's volumes (GET /v1/volumes), "
                               "asked of the cloud: 503 when it does not answer. With accept_offer: an "
                               "offer's shape, instances, duration and start replace the body's; 400 "
                               "bad_offer (not made for the project), 409 offer_expired, 409 offer_gone (the "
                               "plan, under the ledger lock, no longer starts it by the offer's start: nothing "
                               "is made); an offer made for a waiting lease cancels that lease when taken.")
    op["responses"] = {"200": {"description": "with dry_run: the preview",
                               "content": {"application/json": {
                                   "schema": wrapped("lease", "LeasePreview", extra=offers)}}},
                       **op["responses"]}
    return op


def readiness_operation() -> dict:
    op = operation("A lease's VM reports its GPU readiness", "lease:readiness:report", 200,
                   wrapped("readiness", "Readiness"), params=[LEASE_ID], body="ReadinessReport",
                   errors=(404, 409, 429), description="Sent by the probe the VM runs at first boot, with the "
                   "lease's secret from its user data instead of a Keystone token. A later report of the "
                   f"same VM replaces the earlier; a VM's reports at least {readiness_reports.MIN_SPACING} s apart "
                   "(429 with Retry-After otherwise).")
    op["security"] = [{"lease_token": []}]
    return op


def done_operation() -> dict:
    op = operation("End a running lease: its work is done", "lease:done", 200, wrapped("lease", "LeaseDone"),
                   params=[LEASE_ID], body="DoneReport", errors=(404, 409),
                   description="Sent by gpu-done in a lease's VM, with the lease's secret (X-Lease-Token) "
                   "instead of a Keystone token, or by a member with a token. The lease ends now and its GPUs go "
                   "back to the queue; the data volume is kept. The body is optional. 409 unless the lease is "
                   "provisioning or active.")
    op["requestBody"]["required"] = False
    op["security"] = [{"lease_token": []}, {"keystone": []}]
    return op


def utilization_operation() -> dict:
    op = operation("A lease's VM reports its GPUs' utilisation", "lease:utilization:report", 200,
                   wrapped("utilization", "UtilizationReceipt"), params=[LEASE_ID], body="UtilizationReport",
                   errors=(404, 409, 429),
                   description="Sent every minute by the guest agent (the readiness probe's) with the lease's "
                   f"secret. At most {lease_agent.MAX_REPORT_BYTES} bytes; a VM's reports at least "
                   f"{gpu_activity.MIN_SPACING} s apart (429 with Retry-After otherwise); at most as many GPUs as "
                   "the VM has, each once. 409 unless the lease is active.")
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
                         paged("leases", "Lease"), params=[
                             param("limit", "query", "page size", {"type": "integer", "minimum": 1}),
                             param("marker", "query", "the last lease id of the previous page"),
                             param("sort_dir", "query", "asc: oldest first (the default); desc: newest first",
                                   {"type": "string", "enum": ["asc", "desc"]}),
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
        "get": operation("A lease's history", "lease:show", 200, paged("events", "Event"),
                         params=[LEASE_ID,
                                 param("limit", "query", "page size (100 by default)", {"type": "integer", "minimum": 1}),
                                 param("marker", "query", "where the previous page ended: take the next page from "
                                                          "events_links (opaque, for this lease and sort_dir); "
                                                          "a count is a marker too: the events to pass over"),
                                 param("sort_dir", "query", "asc: oldest first (the default); desc: newest first",
                                       {"type": "string", "enum": ["asc", "desc"]})],
                         errors=(404,)),
    },
    "/v1/leases/{lease_id}/resume": {
        "post": operation("Resume a lease an idle rule parked", "lease:resume", 200, wrapped("lease", "Lease"),
                          params=[LEASE_ID], errors=(404, 409),
                          description="Sooner than its held resume slot (now, or the earliest free slot) if that "
                                      "delays no planned lease; otherwise the held slot stays, and the lease's "
                                      "events say why. 409 unless the lease is parked; 403 (gpu_tenancy.over_budget), nothing "
                                      "moved, if the hours it would move sooner pass the project's GPU-hour budget "
                                      "in a period."),
    },
    "/v1/leases/{lease_id}/readiness": {"post": readiness_operation()},
    "/v1/leases/{lease_id}/done": {"post": done_operation()},
    "/v1/leases/{lease_id}/utilization": {"post": utilization_operation()},
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
        "patch": operation("Change some of a project's limits for the GPU models given", "quota:update", 200,
                           wrapped("quota", "Quota"), params=[PROJECT_ID], body="QuotaChange",
                           description="Limits not given keep their values, as stored when the change is "
                                       "made (two changes at once both hold). Waiting leases are replanned."),
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
        "put": operation("Set a project's webhook", "webhook:update", 200, wrapped("webhook", "NewWebhook"),
                         params=[PROJECT_ID], body="WebhookUpdate",
                         description="Notices: lease.ending_soon, warn_before_end_seconds before a lease's end; "
                                     "lease.idle, when a lease's GPUs have been idle past the operator's rule; "
                                     "lease.parked and lease.resumed, when such a rule parks a lease and it comes back "
                                     "(lease.parked again, with the new resume_by, when its held slot moves). "
                                     "Each POST carries X-GPU-Tenancy-Signature: sha256=<HMAC-SHA256 of "
                                     "'<X-GPU-Tenancy-Timestamp>.<body>' with the secret>, X-GPU-Tenancy-Event and "
                                     "X-GPU-Tenancy-Delivery (the notice's id, the same on every try of it: "
                                     "delivery is at least once, and a receiver drops a repeat by it); failed "
                                     "deliveries are retried with a doubling backoff, and not redirected. A URL whose host is a loopback, "
                                     "link-local, private or other non-global address is refused (400) unless "
                                     "its network is in webhook_allowed_networks. The answer shows the secret, once."),
        "delete": operation("Remove a project's webhook", "webhook:update", 204, None, params=[PROJECT_ID],
                            errors=(404,)),
    },
    "/v1/capacity": {
        "get": operation("GPUs per model now, and with start and end each host's free GPUs over time",
                         "capacity:show", 200, closed({"capacity": {"oneOf": [ref("Capacity"),
                                                                              ref("CapacityWithCalendar")]}}),
                         params=WINDOW,
                         description=f"start and end come together; at most {MAX_CALENDAR_SPAN // 86400} days "
                                     "apart; start may be 'now'. Free GPUs are those neither held nor planned "
                                     "for a waiting lease; each step says apart how many are planned, as planned "
                                     "at the last replan (at most one engine tick old)."),
    },
    "/v1/usage": {
        "get": usage_operation(),
    },
    "/v1/volumes": {
        "get": operation("A project's volumes, as the cloud has them", "volume:list", 200,
                         wrapped("volumes", "Volume", many=True, extra={"project_id": {"type": "string"}}),
                         params=[PROJECT_FILTER], errors=(503,),
                         description="Those free for a lease can be named in a new lease's volume.id. "
                                     "503 when the cloud does not answer."),
    },
    "/v1/queue": {
        "get": operation("Everyone's waiting leases, in planned order per GPU model", "queue:show", 200,
                         wrapped("queue", "Queue"), params=[
                             GPU_MODEL_FILTER, param("limit", "query", "page size (100 by default)",
                                                     {"type": "integer", "minimum": 1}),
                             param("marker", "query", "where the previous page ended: take the next page "
                                                      "from queue.leases_links")],
                         description="Each waiting lease with its place, ETA and the reason that holds it back "
                                     "the most. Another project's leases show no project, id or name unless "
                                     "queue:show:all_projects allows (admins). A page at a time: "
                                     "queue.leases_links has the next page's link while more follow; the "
                                     "marker is the last entry's place in the order, not a lease id."),
    },
    "/v1/share": {
        "get": operation("Fair-share standing per project and GPU model", "share:show", 200,
                         wrapped("share", "Share"), params=[GPU_MODEL_FILTER],
                         description="Quota, GPUs held and borrowed now, decayed use, weight and the rank the "
                                     "planner gives equal-priority leases (computed as the planner does, with "
                                     "its half-life). Another project's row shows no name unless "
                                     "share:show:all_projects allows (admins). Made at most once per "
                                     "engine_tick_seconds and replan in each API process: `now` says when, "
                                     "up to that long ago."),
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
                                       "end, and those only planned there, and parked leases' held resume slots, are planned again "
                                       "on other hosts (each told in its events). Waiting leases are replanned at once."),
    },
    "/v1/audit": {"get": audit_operation()},
    "/v1/whatif": {
        "get": operation("The last what-ifs, newest first (without their figures)", "whatif:show", 200,
                         wrapped("whatifs", "WhatIf", many=True)),
        "post": operation("Replay the lease history under the current and proposed settings", "whatif:run", 202,
                          wrapped("whatif", "WhatIf"), body="WhatIfCreate", errors=(409,),
                          description="A job: the answer comes at once with its id; GET /v1/whatif/{job_id} "
                                      "shows its progress, then the figures of both replays (waits per project "
                                      "and GPU model, 8+ GPU P90, ETA kept, GPU use, Jain's fairness, who gains "
                                      "or loses). The replay is the service's planner with the engine's "
                                      "semantics, on the hosts in service now; it changes nothing. 400 for a "
                                      "change it does not know or cannot apply, or a window of more than "
                                      f"{whatif_history.MAX_LEASES} leases; 409 while another what-if runs "
                                      "(one at a time)."),
    },
    "/v1/whatif/{job_id}": {
        "get": operation("A what-if's progress and, once done, its figures", "whatif:show", 200,
                         wrapped("whatif", "WhatIf"), params=[path_param("job_id", "the what-if's id")],
                         errors=(404,)),
    },
    "/v1/openapi.json": {
        "get": operation("This document", None, 200, free_form("this OpenAPI document")),
    },
}


def blazar_operation(summary: str, policy: str, ok: int, ok_schema: dict | None, *, lease_id: bool = False,
                     body: str | None = None, errors: tuple[int, ...] = ()) -> dict:
    """An operation of the Blazar-compatible API: its errors are in Blazar's form."""
    op = operation(summary, policy, ok, ok_schema, params=[LEASE_ID] if lease_id else [], body=body,
                   errors=errors, description="Blazar-compatible (python-blazarclient, Heat's OS::Blazar::Lease).")
    blazar_error = {"application/json": {"schema": ref("BlazarError")}}
    for code in op["responses"]:
        if code != str(ok):
            op["responses"][code] = {"description": ERROR_STATUSES[int(code)], "content": blazar_error}
    return op


BLAZAR_PATHS = {
    "/reservation/v1/leases": {
        "get": blazar_operation("List leases (an admin: every project's)", "lease:list", 200,
                                wrapped("leases", "BlazarLease", many=True)),
        "post": blazar_operation("Make a lease with one flavor:instance or virtual:instance reservation",
                                 "lease:create", 201, wrapped("lease", "BlazarLease"), body="BlazarLeaseCreate",
                                 errors=(409,)),
    },
    "/reservation/v1/leases/{lease_id}": {
        "get": blazar_operation("Show a lease", "lease:show", 200, wrapped("lease", "BlazarLease"), lease_id=True,
                                errors=(404,)),
        "put": blazar_operation("Move a lease's end", "lease:update", 200, wrapped("lease", "BlazarLease"),
                                lease_id=True, body="BlazarLeaseUpdate", errors=(404, 409)),
        "delete": blazar_operation("Cancel a waiting lease, or end a running one now", "lease:delete", 204, None,
                                   lease_id=True, errors=(404, 409)),
    },
}
PATHS.update(BLAZAR_PATHS)


def with_operation_ids(paths: dict) -> dict:
    for path, methods in paths.items():
        for method, op in methods.items():
            words = [w.strip("{}").replace(".", "_") for w in path.split("/")[1:] if w != "v1"]
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
def document() -> ResponseReturnValue:
    return build()

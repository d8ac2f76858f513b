"""The response side of /v1/openapi.json: what each renderer answers, as closed
schemas. Every object lists each key it has (`required` is all its `properties`,
no others allowed: a value that may be empty is nullable, never optional), and
those built for a renderer take their keys from the renderer's own field list.
So a key added to or dropped from a renderer fails the tests that validate live
answers against this document (tests/functional/test_openapi.py, test_fuzz_api.py),
and a field list that names a key with no schema fails at import."""
from __future__ import annotations

from typing import Any

from collections.abc import Iterable
from dataclasses import fields

from gpu_tenancy.api import (audit, images, lease_view, offer_view, priority_classes, queue, quotas, share, shapes,
                             whatif)
from gpu_tenancy.domain.failures import FailureClass, Retry
from gpu_tenancy.domain.offers import Kind as OfferKind
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import capacity, webhooks


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict) -> dict:
    return {"oneOf": [schema, {"type": "null"}]}


def closed(properties: dict, keys: Iterable[str] | None = None, **extra: Any) -> dict:
    """An object with exactly these properties, all present. With `keys` (a renderer's
    field list), the properties are put in its order and must be exactly its keys."""
    if keys is not None:
        keys = list(keys)
        if set(keys) != set(properties):
            raise ValueError(f"the schema is not the renderer's keys: renderer keys without a schema "
                             f"{sorted(set(keys) - set(properties))}, schema properties the renderer lacks "
                             f"{sorted(set(properties) - set(keys))}")
        properties = {k: properties[k] for k in keys}
    return {"type": "object", "additionalProperties": False, "required": list(properties),
            "properties": properties, **extra}


def free_form(description: str) -> dict:
    """An object whose keys are data, not a contract (an audit record's before/after)."""
    return {"type": "object", "additionalProperties": True, "description": description}


def keys_of(dataclass_type: Any) -> list[str]:
    return [f.name for f in fields(dataclass_type)]


TIME = {"type": "string", "format": "date-time"}
STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
RATED = nullable({"type": "number", "description": "GPU-hours times the price per GPU-hour; null where no price is set"})
BOOLEAN = {"type": "boolean"}
LINKS = {"type": "array", "items": closed({"rel": STRING, "href": STRING})}
RETIREMENT = {"created_at": TIME, "retired_at": nullable(TIME), "links": LINKS}
REASONS = {"type": "array", "items": closed({"code": STRING, "message": STRING})}
PROBE_STATUS = {"type": "string", "enum": ["waiting", "ready", "failed"]}

FAILURE_ENTRY = closed({
    "at": TIME, "attempt": INTEGER,
    "class": {"type": "string", "enum": [c.value for c in FailureClass]},
    "message": {"type": "string", "description": "what failed, the cloud's words kept"},
    "user_message": STRING, "operator_hint": STRING,
    "retry": {"type": "string", "enum": [r.value for r in Retry]},
    "hosts": {"type": "array", "items": STRING},
    "action": {"type": "string", "enum": ["retried", "replaced", "failed"]},
    "retry_at": nullable(TIME)})

LEASE = {
    "id": STRING, "name": STRING, "project_id": STRING, "user_id": STRING,
    "status": {"type": "string", "enum": [s.value for s in LeaseState]},
    "shape": STRING, "gpu_model": STRING, "gpus_per_instance": INTEGER, "instances": INTEGER,
    "requested_start": TIME, "latest_start": nullable(TIME),
    "duration": {"type": "integer", "description": "seconds"}, "start": nullable(TIME), "end": nullable(TIME),
    "cancelled_at": nullable({**TIME, "description": "when it was cancelled; a cancelled lease never started, "
                                                     "so its start and end are null"}),
    "priority": INTEGER, "priority_class": nullable(STRING), "preemptible": BOOLEAN, "borrowing": BOOLEAN,
    "early_end": nullable(closed(
        {"kind": STRING, "at": nullable(TIME), "for_lease": nullable(STRING), "reason": nullable(STRING)},
        description="set when the lease is reclaimed or preempted: kind, the time it ends at, for which "
                    "lease, why")),
    "park": nullable(closed(
        {"parked_at": nullable(TIME), "resume_by": nullable(TIME),
         "remaining": nullable({"type": "integer", "description": "seconds of its time left when it parked"})},
        description="set while an idle rule has it parked: when it parked, and the start of its held "
                    "resume slot (it resumes then at the latest; POST .../resume asks for sooner)")),
    "boot": {"type": "string", "enum": ["service", "tenant"],
             "description": "who boots the lease's VMs: the service, or the project's members"},
    "flavor": nullable(closed({"id": STRING, "name": STRING},
                              description="the lease's own private flavor, once made: the project may boot "
                                          "with it only while the lease is active")),
    "vms_free": nullable({"type": "integer", "description": "how many more servers the lease's flavor can "
                                                            "boot now (null unless provisioning or active)"}),
    "image": nullable(STRING),
    "volume": nullable(closed({"id": nullable(STRING), "size_gb": nullable(INTEGER)})),
    "key_name": nullable(STRING),
    "queue": nullable(closed({"position": nullable(INTEGER), "eta": nullable(TIME),
                              "start_by": nullable({**TIME, "description": (
                                  "the ETA with a margin learnt from how late the project's recent leases "
                                  "started: most leases start by it (null: no ETA, or no margin told yet)")}),
                              "start_by_basis": nullable(closed({
                                  "source": {"type": "string", "enum": ["project", "everyone", "load_class"],
                                             "description": "whose leases the margin was learnt from: the "
                                             "project's own, everyone's (it has too few), or those that "
                                             "started at the project's load when the margin was computed, where they "
                                             "started later"},
                                  "quantile": {"type": "number", "description": "the share of those leases "
                                               "that started within the margin"},
                                  "samples": INTEGER,
                                  "ratio": {"type": "number", "description": "the margin over the wait told: "
                                            "start-by = ETA + ratio x the wait left to the ETA (at least a minute)"},
                                  "load_class": nullable(INTEGER),
                                  "held_over_fair_share": nullable(closed(
                                      {"from": NUMBER, "below": nullable(NUMBER)},
                                      description="what the project held over its fair share of a GPU "
                                                  "model's GPUs (its quota weight's part), at its most "
                                                  "loaded model, when the margin was computed")),
                                  "message": STRING},
                                  description="why the start-by is as far past the ETA as it is (null: no "
                                              "start-by, or the margin not computed since an upgrade)")),
                              "reasons": REASONS},
                             description="for a waiting lease: its position, ETA, start-by and why it waits")),
    "allocations": {"type": "array", "items": closed({"instance": INTEGER, "host": STRING, "gpus": INTEGER,
                                                      "start": TIME, "end": TIME})},
    "servers": {"type": "array", "items": closed({
        "instance": INTEGER, "id": nullable(STRING), "host": nullable(STRING), "status": nullable(STRING),
        "addresses": {"type": "array", "description": "once ACTIVE: fixed and floating",
                      "items": closed({"network": STRING, "ip": STRING,
                                       "kind": {"type": "string", "enum": ["fixed", "floating"]}})},
        "ssh": nullable({"type": "string", "description": "ready to copy: ssh <login>@<floating, else fixed IP>"})})},
    "ready": {"type": "boolean", "description": "active, and every VM reported its GPUs usable when the lease "
                                                "asked for the readiness probe"},
    "readiness": nullable(ref("Readiness")),
    "failure": nullable(closed({"class": STRING, "message": STRING})),
    "failures": {"type": "array", "items": FAILURE_ENTRY,
                 "description": "the lease's failure history: every failed attempt, classified, and what the "
                                "engine did (retried elsewhere, re-placed off a down host, failed)"},
    "created_at": TIME, "updated_at": TIME, "links": LINKS,
    "network": nullable(closed({
        "id": nullable({"type": "string", "description": "null when the cloud allocates one (chosen_by auto)"}),
        "name": nullable(STRING),
        "chosen_by": {"type": "string", "enum": ["request", "only", "default", "auto"],
                      "description": "asked for; the project's only network; the operator's default; "
                                     "auto-allocated by the cloud"}},
        description="the VMs' network; null on a cloud without tenant networks")),
    "floating_ip": {"type": "boolean", "description": "each VM gets a floating IP"},
}

READINESS = {
    "status": PROBE_STATUS,
    "instances": {"type": "array", "items": closed({
        "instance": INTEGER, "status": PROBE_STATUS, "detail": nullable(STRING), "reported_at": nullable(TIME)})},
}
# shown once, in the answer to POST /v1/leases of a lease that asked for the probe
READINESS_SECRET = {
    "url": {"type": "string", "description": "where the VMs report"},
    "token": {"type": "string", "description": "the lease's secret (X-Lease-Token), with which its VMs "
                                               "report; the service puts it on the VMs it boots"},
}

WEBHOOK = {"project_id": STRING, "url": STRING, "events": {"type": "array", "items": {"type": "string", "enum": list(webhooks.EVENTS)}},
           "signature": {"type": "string", "description": "how each POST is signed"},
           "created_at": TIME, "updated_at": TIME,
           "recent_deliveries": nullable({"type": "array", "items": closed({
               "id": {"type": "integer"}, "lease_id": STRING, "event": STRING, "status": STRING,
               "attempts": {"type": "integer"}, "last_error": nullable(STRING)}),
               "description": "admins only (null for others): the last 20 deliveries, with why they failed"})}

BUDGET_USE = closed({
    "start": TIME, "end": TIME, "used": {"type": "number", "description": "before now"},
    "planned": {"type": "number", "description": "held, committed or asked for after now"},
    "left": NUMBER}, description="GPU-hours of the period that holds now")

CAPACITY_NOW = {
    "now": TIME,
    "gpu_models": {"type": "object", "additionalProperties": closed({
        "hosts": INTEGER,
        "hosts_in_service": {"type": "integer", "description": "enabled, up and not drained"},
        "gpus": {"type": "integer", "description": "on all hosts of the model"},
        "in_use": {"type": "integer", "description": "held by leases now"},
        "free": {"type": "integer", "description": "free now on hosts in service"},
        "largest_free_block": {"type": "integer", "description": "most GPUs free now on one host in service"},
        "waiting_leases": INTEGER}, keys_of(capacity.ModelCapacity))},
}
CALENDAR = {"type": "array", "items": closed({
    "host": STRING, "gpu_model": STRING, "gpus": INTEGER, "in_service": BOOLEAN,
    "free": {"type": "array", "description": "GPUs as steps covering [start, end): free (neither held nor "
                                             "planned for a waiting lease) and planned (for waiting leases, "
                                             "as the plan places them); held is gpus - free - planned",
             "items": closed({"from": TIME, "to": TIME, "free": INTEGER,
                              "planned": {"type": "integer", "description": "planned for waiting leases"}})}},
    keys_of(capacity.HostCalendar))}

SECONDS = nullable({"type": "integer", "description": "seconds; null when no lease of it started"})
WHATIF_WAITS = {"leases": {"type": "integer", "description": "that started"}, "p50": SECONDS, "p90": SECONDS}
WHATIF_SIDE = closed({
    "leases": {"type": "integer", "description": "leases that started in the replay"},
    "never_started": {"type": "integer", "description": "leases no host or quota could take"},
    "p50": SECONDS, "p90": SECONDS,
    "big_leases": {"type": "integer", "description": "leases of 8 GPUs or more that started"},
    "big_p90": SECONDS,
    "eta_kept": nullable({"type": "number", "description": "share of the leases that waited which started by "
                                                          "their first ETA + 10 min"}),
    "start_by_kept": nullable({"type": "number", "description": "share of the leases that waited which started by "
                                                               "the start-by told with their first ETA + 10 min"}),
    "gpu_use": nullable({"type": "number", "description": "GPU-time held in the window over the GPUs in service"}),
    "jain": {"type": "number", "description": "Jain's index over projects of their mean bounded slowdown"},
    "groups": {"type": "array", "items": closed({"project_id": STRING, "gpu_model": STRING, **WHATIF_WAITS})},
    "projects": {"type": "array", "items": closed({"project_id": STRING, **WHATIF_WAITS})},
    "cdf": {"type": "array", "description": "the wait CDF: [seconds, share of leases that waited at most that]",
            "items": {"type": "array", "items": NUMBER, "minItems": 2, "maxItems": 2}},
}, description="one replay's figures; a wait is from the start a lease asked for to its start")
WHATIF_RESULT = closed({
    "window": closed({"start": TIME, "end": TIME, "days": NUMBER}),
    "leases": {"type": "integer", "description": "leases of the history (asked for in the window, held GPUs)"},
    "gpus": {"type": "integer", "description": "GPUs on the hosts in service"},
    "changes": {"type": "array", "items": STRING},
    "current": WHATIF_SIDE, "proposed": WHATIF_SIDE,
    "projects": {"type": "array", "items": closed({
        "project_id": STRING, "p90_current": SECONDS, "p90_proposed": SECONDS,
        "verdict": {"type": "string", "enum": ["gains", "loses", "same"],
                    "description": "gains: its P90 falls by more than a minute; loses: rises by more"}})},
    "replay_seconds": NUMBER})

HIDDEN_IF_OTHERS = "null for another project's when the caller may not see them (queue:show:all_projects)"
QUEUE_ENTRY = {
    "position": nullable({"type": "integer", "description": "1-based, among the leases waiting for the same GPU "
                                                            "model, in the planner's order; null until planned"}),
    "gpu_model": STRING,
    "status": {"type": "string", "enum": ["requested", "queued"]},
    "project": {"type": "string", "description": "the project's id, or 'another project'"},
    "project_id": nullable({"type": "string", "description": HIDDEN_IF_OTHERS}),
    "lease_id": nullable({"type": "string", "description": HIDDEN_IF_OTHERS}),
    "name": nullable({"type": "string", "description": HIDDEN_IF_OTHERS}),
    "hidden": {"type": "boolean", "description": "another project's lease whose project, id and name are left out"},
    "shape": STRING, "gpus_per_instance": INTEGER, "instances": INTEGER,
    "gpus": {"type": "integer", "description": "GPUs per VM times VMs"},
    "priority": INTEGER, "preemptible": BOOLEAN,
    "requested_start": TIME,
    "waiting_since": {**TIME, "description": "when it was asked for"},
    "eta": nullable({**TIME, "description": "its planned start; null when it has no slot"}),
    "start_by": nullable({**TIME, "description": "its ETA with its project's margin (as the lease's queue.start_by); "
                                                 "null for another project's lease, or with no ETA"}),
    "reason": nullable(closed({"code": STRING, "message": STRING},
                              description="the reason that holds it back the most; for a hidden lease, in "
                                          "words that name no project")),
}
SHARE_ROW = {
    "rank": {"type": "integer", "description": "per GPU model: 1 goes first in fair share, by score plus "
                                               "queued_charge; equal ones share a rank (priority and the wait "
                                               "bound come before fair share)"},
    "gpu_model": STRING,
    "project": {"type": "string", "description": "the project's id, or 'another project'"},
    "project_id": nullable({"type": "string", "description": "null for another project's row when the caller "
                                                             "may not see it (share:show:all_projects)"}),
    "hidden": {"type": "boolean", "description": "another project's row whose name is left out"},
    "nominal_gpus": {"type": "integer", "description": "its quota: GPUs it may hold at any instant"},
    "borrow_gpus": {"type": "integer", "description": "more it may hold on idle capacity"},
    "in_use_gpus": {"type": "integer", "description": "GPUs it holds now"},
    "borrowed_gpus": {"type": "integer", "description": "of those, beyond its quota"},
    "decayed_gpu_hours": {"type": "number", "description": "recent use, each hour counting half as much per "
                                                           "half_life of age"},
    "weight": {"type": "number", "description": "fair-share weight of its quota (1 without one)"},
    "score": nullable({"type": "number", "description": "decayed_gpu_hours / weight: lower goes first"}),
    "queued_charge": nullable({"type": "number", "description": "with the queued charge on (null: off), what it "
                                                                "adds to the score of the project's next lease "
                                                                "(asked now, priority 0, not spared): K x the "
                                                                "GPU-hours it holds from now on and has waiting, "
                                                                "over its weight"}),
    "waiting_leases": INTEGER,
}

QUEUE_PAGE = {"now": TIME, "gpu_model": nullable({"type": "string", "description": "the filter, if given"}),
              "leases": {"type": "array", "items": ref("QueueEntry")}}

SCHEMAS = {
    "Error": closed({"errors": {"type": "array", "minItems": 1, "items": closed({
        "status": INTEGER, "code": STRING, "title": STRING, "detail": STRING,
        "request_id": {"type": "string", "description": "as in X-OpenStack-Request-Id"}})}},
        description="OpenStack API-WG error form"),
    "Lease": closed(LEASE, lease_view.FIELDS),
    "NewLease": closed({**LEASE, "readiness": nullable(ref("NewReadiness"))}, lease_view.FIELDS,
                       description="a lease as the answer to POST /v1/leases shows it: with the readiness "
                                   "secret when it asked for the probe"),
    "LeasePreview": closed({
        "id": {"type": "null"}, "name": nullable(STRING), "status": {"const": "preview"},
        "shape": STRING, "gpu_model": STRING, "gpus_per_instance": INTEGER, "instances": INTEGER,
        "duration": {"type": "integer", "description": "seconds"}, "image": nullable(STRING),
        "start": nullable(TIME), "end": nullable(TIME), "borrowing": BOOLEAN,
        "queue": closed({"position": nullable(INTEGER), "eta": nullable(TIME), "reasons": REASONS}),
        "allocations": {"type": "array", "items": closed({"instance": INTEGER, "host": STRING})},
        "boot": LEASE["boot"], "network": LEASE["network"], "floating_ip": LEASE["floating_ip"]},
        description="what POST /v1/leases?dry_run=true would give; nothing is created"),
    "Offer": closed({
        "id": {"type": "string", "description": "give it as accept_offer to POST /v1/leases to take the offer"},
        "kind": {"type": "string", "enum": [k.value for k in OfferKind],
                 "description": "gpu_model: another model with enough memory; fewer_gpus, fewer_instances: a "
                                "smaller lease; shorter: the longest that fits a gap; borrow: now, beyond the "
                                "quota on idle GPUs; later: the planned start, reserved (the GPUs are held)"},
        "summary": STRING, "shape": STRING, "gpu_model": STRING, "gpus_per_instance": INTEGER,
        "instances": INTEGER, "duration": {"type": "integer", "description": "seconds"},
        "start": {**TIME, "description": "its exact planned start, from the same plan as the lease's"},
        "end": TIME,
        "reserved": {"type": "boolean", "description": "taken, it asks to start exactly at start"},
        "borrowing": {"type": "boolean", "description": "beyond the quota on idle GPUs: it may be reclaimed"},
        "expires_at": {**TIME, "description": "taken later: 409 offer_expired"}}, offer_view.FIELDS,
        description="an alternative to a lease that would wait"),
    "Readiness": closed(READINESS),
    "LeaseDone": closed({"id": STRING, "status": {"type": "string", "enum": [s.value for s in LeaseState]},
                         "end": TIME}, description="the lease, ending"),
    "UtilizationReceipt": closed({
        "instance_reports": {"type": "integer", "description": "how many of the lease's VMs have reported"},
        "last_report_at": TIME,
        "busy_at": nullable({**TIME, "description": "the last report with a GPU at or above the idle threshold"}),
        "idle_seconds": {"type": "integer", "description": "how long every GPU of the lease has been idle"},
        "next_report_after": {"type": "integer", "description": "seconds: when the agent reports next"}}),
    "NewReadiness": closed({**READINESS, **READINESS_SECRET}),
    "Event": closed({"at": TIME, "actor": STRING, "kind": STRING, "from": nullable(STRING), "to": nullable(STRING),
                     "message": STRING}),
    "Shape": closed({**shapes.CREATE["properties"], **RETIREMENT}),
    "Image": closed({**images.CREATE["properties"], **RETIREMENT,
                     "default": {"type": "boolean", "description": "the image a lease boots when it names none "
                                                                   "(the oldest one not retired)"}}),
    "Webhook": closed(WEBHOOK),
    "NewWebhook": closed({**WEBHOOK, "secret": {"type": "string", "description": "shown this once"}}),
    "Quota": closed({"project_id": STRING, "gpu_models": {"type": "object", "additionalProperties": closed({
        "gpus": INTEGER, "borrow_gpus": INTEGER,
        "max_duration": nullable({"type": "integer", "description": "seconds"}),
        "weight": NUMBER}, quotas.LIMITS["properties"])}}),
    "Capacity": closed(CAPACITY_NOW),
    "CapacityWithCalendar": closed({**CAPACITY_NOW, "calendar": CALENDAR},
                                   description="the answer with start and end"),
    "Host": closed({
        "name": STRING, "gpu_model": STRING, "gpus": INTEGER,
        "in_use": {"type": "integer", "description": "GPUs held by leases now"},
        "held_until": nullable({**TIME, "description": "the end of the last lease holding GPUs there: a "
                                                       "drained host is empty then"}),
        "up": {"type": "boolean", "description": "Nova's service state"},
        "enabled": {"type": "boolean", "description": "Nova's service status"},
        "drained": {"type": "boolean", "description": "set by an admin: no new leases"},
        "in_service": {"type": "boolean", "description": "up, enabled and not drained: takes new leases"},
        "aggregate": nullable(STRING), "reported_at": TIME}),
    "AuditRecord": closed({
        "id": INTEGER, "at": TIME, "user_id": nullable(STRING),
        "user_project_id": nullable({"type": "string", "description": "the project of the caller's token"}),
        "request_id": nullable({"type": "string", "description": "as in X-OpenStack-Request-Id"}),
        "remote_address": nullable({"type": "string",
                                    "description": "the first hop of X-Forwarded-For, else the peer"}),
        "action": {"type": "string", "enum": list(audit.ACTIONS)},
        "target_type": STRING, "target_id": STRING, "target_project_id": nullable(STRING),
        "before": nullable(free_form("the resource as the API showed it before")),
        "after": nullable(free_form("the resource as the API showed it after")),
        "outcome": STRING}, audit.FIELDS),
    "WhatIf": closed({
        "id": STRING, "status": {"type": "string", "enum": ["running", "done", "failed"]},
        "days": NUMBER, "changes": {"type": "array", "items": STRING},
        "leases": {"type": "integer", "description": "leases in the history it replays"},
        "progress": {"type": "number", "description": "0 to 1"},
        "created_by": nullable(STRING), "created_at": TIME, "updated_at": TIME, "finished_at": nullable(TIME),
        "error": nullable({"type": "string", "description": "why it failed"}),
        "result": nullable({**WHATIF_RESULT, "description": "once done; null while it runs, if it failed, and "
                                                             "in the listing"}),
        "links": LINKS}, whatif.FIELDS),
    "Volume": closed({
        "id": STRING, "name": STRING, "size_gb": INTEGER,
        "status": {"type": "string", "description": "Cinder's: available, in-use, creating, error, ..."},
        "attached_to": {"type": "array", "items": STRING, "description": "server ids"},
        "made_by_lease": nullable({"type": "string", "description": "the lease that made it, if one did"}),
        "lease_id": nullable({"type": "string", "description": "the unfinished lease it is the data volume of"}),
        "free_for_a_lease": {"type": "boolean", "description": "available, and no unfinished lease names it"}}),
    "Usage": closed({"start": TIME, "end": TIME, "currency": nullable(
        {"type": "string", "description": "the operator's currency of the prices (usage_currency)"}),
        "rated_total": RATED, "projects": {"type": "array", "items": closed({
        "project_id": STRING,
        "gpu_models": {"type": "object", "additionalProperties": ref("UsageFigures")},
        "rated_total": RATED,
        "users": {"type": "array", "items": closed({
            "user_id": {"type": "string", "description": "who asked for the leases"},
            "gpu_models": {"type": "object", "additionalProperties": ref("UsageFigures")},
            "rated_total": RATED})},
        "budgets": {"type": "array", "items": closed({
            "id": STRING, "gpu_model": STRING, "gpu_hours": NUMBER, "period": STRING,
            "current": nullable(ref("BudgetUse"))})}})}}),
    "UsageFigures": closed({"gpu_hours": NUMBER, "price_per_gpu_hour": nullable(
        {"type": "number", "description": "the operator's price per GPU-hour of the model (usage_prices)"}),
        "rated": RATED}),
    "PriorityClass": closed({"name": STRING, **priority_classes.FIELDS["properties"], "updated_at": TIME,
                             "links": LINKS}),
    "BudgetUse": BUDGET_USE,
    "QueueEntry": closed(QUEUE_ENTRY, queue.FIELDS),
    # a page of the queue: with leases_links (the next page) only when another follows
    "Queue": {"oneOf": [closed(QUEUE_PAGE), closed({**QUEUE_PAGE, "leases_links": LINKS})]},
    "ShareRow": closed(SHARE_ROW, share.FIELDS),
    "Share": closed({"now": TIME, "gpu_model": nullable({"type": "string", "description": "the filter, if given"}),
                     "half_life": {"type": "integer", "description": "seconds in which past use counts half as "
                                                                     "much: the planner's"},
                     "projects": {"type": "array", "items": ref("ShareRow")}}),
    "Budget": closed({
        "id": STRING, "project_id": STRING, "gpu_model": STRING, "gpu_hours": NUMBER,
        "period": {"type": "string", "enum": ["month", "range"]},
        "start": nullable(TIME), "end": nullable(TIME), "created_at": TIME, "current": nullable(ref("BudgetUse")),
        "links": LINKS}),
}

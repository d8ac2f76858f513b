"""The Blazar-compatible API in /v1/openapi.json: its request bodies (as Blazar
documents them; asks.py reads them, with Blazar's own checks and words) and its
answers, closed as the native ones are (api/response_schemas.py), so a key added to
or dropped from view.py fails the test that validates live answers against it
(tests/functional/test_blazar_api.py)."""
from __future__ import annotations

from gpu_tenancy.api.blazar import asks
from gpu_tenancy.api.response_schemas import BOOLEAN, INTEGER, STRING, closed, nullable

ASKED_TIME = {"type": "string", "description": "UTC, \"YYYY-MM-DD HH:MM\", or \"now\""}
SHOWN_TIME = {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$",
              "description": "UTC, as Blazar answers (YYYY-MM-DDTHH:MM:SS.ffffff)"}
# closed, as asks.py reads them: a key they do not name is refused (400, "unknown ... parameters");
# which of a reservation's keys its resource_type takes, asks.RESERVATION_KEYS says
RESERVATION_ASK = {
    "type": "object",
    "additionalProperties": False,
    "required": ["resource_type"],
    "properties": {
        "resource_type": {"type": "string", "enum": list(asks.INSTANCE_TYPES),
                          "description": "physical:host and virtual:floatingip are refused (400)"},
        "flavor_id": {"type": "string", "description": "flavor:instance: a shape's name (GET /v1/shapes)"},
        "amount": {"type": "integer", "minimum": 1, "maximum": asks.MAX_AMOUNT},
        "affinity": {"description": "only None (gpu-tenancy places the VMs)"},
        "vcpus": INTEGER, "memory_mb": INTEGER, "disk_gb": INTEGER,
        "resource_properties": {"type": "string", "description": "virtual:instance: empty, or "
                                "'[\"==\", \"$shape\", \"<name>\"]' or '[\"==\", \"$gpu_model\", \"<model>\"]'"},
    },
}
CREATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "start_date", "end_date", "reservations"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": asks.MAX_NAME},
        "start_date": ASKED_TIME, "end_date": ASKED_TIME,
        "reservations": {"type": "array", "minItems": 1, "maxItems": 1, "items": RESERVATION_ASK},
        "events": {"type": "array", "maxItems": 0}, "before_end_date": {"type": "null"},
    },
}
UPDATE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "end_date": ASKED_TIME,
        "name": {"type": "string", "minLength": 1, "maxLength": asks.MAX_NAME,
                 "description": "a new name, free among the project's unfinished leases"},
        "start_date": {**ASKED_TIME, "description": "only the lease's own (a new one is refused: 409)"},
        "reservations": {"type": "array", "description": "only their ids (a change is refused: 409, as Blazar "
                                                         "refuses it for flavor:instance)"},
        "before_end_date": {"type": "null"},
    },
}
RESERVATION = closed({
    "id": STRING, "lease_id": STRING, "resource_id": STRING, "resource_type": {"const": "flavor:instance"},
    "status": {"type": "string", "enum": ["pending", "active", "deleted", "error"]},
    "missing_resources": BOOLEAN, "resources_changed": BOOLEAN,
    "vcpus": nullable(INTEGER), "memory_mb": nullable(INTEGER), "disk_gb": nullable(INTEGER), "amount": INTEGER,
    "affinity": {"type": "null"},
    "flavor_id": nullable({"type": "string", "description": "the flavor to boot with, from the lease's start"}),
    "flavor_name": nullable(STRING), "aggregate_id": {"type": "null"}, "server_group_id": {"type": "null"},
    "resource_properties": {"type": "string", "description": "JSON: the shape, its GPU model and GPUs"},
    "created_at": SHOWN_TIME, "updated_at": SHOWN_TIME})
EVENT = closed({"id": STRING, "lease_id": STRING, "event_type": {"enum": ["start_lease", "end_lease"]},
                "time": SHOWN_TIME, "status": {"enum": ["UNDONE", "IN_PROGRESS", "DONE", "ERROR"]},
                "created_at": SHOWN_TIME, "updated_at": SHOWN_TIME})
SCHEMAS = {
    "BlazarLeaseCreate": CREATE,
    "BlazarLeaseUpdate": UPDATE,
    "BlazarLease": closed({
        "id": STRING, "name": STRING, "user_id": STRING, "project_id": STRING,
        "start_date": SHOWN_TIME, "end_date": SHOWN_TIME, "trust_id": {"type": "null"},
        "status": {"enum": ["PENDING", "STARTING", "ACTIVE", "TERMINATING", "TERMINATED", "ERROR"]},
        "degraded": BOOLEAN, "created_at": SHOWN_TIME, "updated_at": SHOWN_TIME,
        "reservations": {"type": "array", "minItems": 1, "maxItems": 1, "items": RESERVATION},
        "events": {"type": "array", "items": EVENT},
        "gpu_tenancy_status": {"type": "string", "description": "the lease's own state (queued, scheduled, ...)"}}),
    "BlazarError": closed({"error_code": INTEGER, "error_message": STRING, "error_name": INTEGER},
                          description="Blazar's error form (blazarclient prints error_message)"),
}

"""/v1/quotas: per project and GPU model, the GPUs it may hold, borrow, for how long, and its fair-share weight."""
from __future__ import annotations

from typing import Any

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.catalog import GPU_MODEL
from gpu_tenancy.api.scope import project_scope
from gpu_tenancy.api.validation import check_identifier, json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock
from gpu_tenancy.engine import quotas
from gpu_tenancy.errors import BadRequest

bp = Blueprint("quotas", __name__, url_prefix="/v1/quotas")

GPU_COUNT = {"type": "integer", "minimum": 0, "maximum": 100000}

LIMITS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["gpus"],
    "properties": {
        "gpus": {**GPU_COUNT, "description": "GPUs the project may hold at any instant"},
        "borrow_gpus": {**GPU_COUNT, "description": "more it may hold while capacity is idle (default 0)"},
        "max_duration": {"oneOf": [
            {"type": "integer", "minimum": 1, "maximum": quotas.MAX_DURATION},
            {"type": "string", "minLength": 2, "maxLength": 64, "description": "ISO 8601, e.g. P7D"},
            {"type": "null"}], "description": "longest lease, in seconds; null (the default) for no limit"},
        "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000,
                   "description": "fair-share weight (default 1)"},
    },
}


def quota_body(limits: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["quota"],
        "properties": {"quota": {
            "type": "object",
            "additionalProperties": False,
            "required": ["gpu_models"],
            "properties": {
                "project_id": {"type": "string", "minLength": 1, "maxLength": 64},
                "gpu_models": {"type": "object", "minProperties": 1, "maxProperties": 64,
                               "propertyNames": GPU_MODEL,
                               "additionalProperties": limits,
                               "description": description},
            },
        }},
    }


UPDATE = quota_body(LIMITS, "the models listed are replaced (omitted fields take their defaults); models not "
                            "listed keep their limits")
# PATCH: only the limits given change, merged under the ledger lock onto the limits then
# stored. `openstack gpu quota set --weight 2` sent by PUT what it had read: two admins'
# edits of one model at once lost the first one's change.
CHANGE = quota_body({**LIMITS, "required": [], "minProperties": 1},
                    "for each model listed, the limits given change (gpus is needed for a model the project "
                    "has no quota for); the others keep their values")


def render(project_id: str, rows: list[m.Quota]) -> dict:
    return {"project_id": project_id,
            "gpu_models": {q.gpu_model: {"gpus": q.gpus, "borrow_gpus": q.borrow_gpus,
                                         "max_duration": q.max_duration, "weight": q.weight} for q in rows}}


@bp.get("")
def index() -> ResponseReturnValue:
    project = project_scope("quota:show", "admin")
    with rt.transaction() as session:
        return {"quotas": [render(p, rows) for p, rows in quotas.of_projects(session, project).items()]}


@bp.get("/<project_id>")
def show(project_id: str) -> ResponseReturnValue:
    rt.authorize("quota:show", check_identifier("project_id", project_id))
    with rt.transaction() as session:
        return {"quota": render(project_id, quotas.of_projects(session, project_id)[project_id])}


@bp.put("/<project_id>")
def update(project_id: str) -> ResponseReturnValue:
    return write(project_id, UPDATE, merge=False)


@bp.patch("/<project_id>")
def change(project_id: str) -> ResponseReturnValue:
    return write(project_id, CHANGE, merge=True)


def write(project_id: str, schema: dict, merge: bool) -> ResponseReturnValue:
    rt.authorize("quota:update", check_identifier("project_id", project_id))
    body = json_body(schema)["quota"]
    if body.get("project_id", project_id) != project_id:
        raise BadRequest(f"the body is for project {body['project_id']} but the URL names {project_id}",
                         "gpu_tenancy.project_mismatch")
    with rt.transaction() as session:
        if merge:   # what is merged onto stays as read until this transaction ends
            ledger_lock(session)
        before = render(project_id, quotas.of_projects(session, project_id)[project_id])
        limits = body["gpu_models"]
        if merge:
            new = sorted(model for model, given in limits.items()   # an unknown one: replace() says so
                         if model not in before["gpu_models"] and "gpus" not in given
                         and model in quotas.known_gpu_models(session))
            if new:
                raise BadRequest(f"project {project_id} has no {', '.join(new)} quota yet: give its gpus",
                                 "gpu_tenancy.invalid_input")
            limits = {model: {**before["gpu_models"].get(model, {}), **given} for model, given in limits.items()}
        rows = quotas.replace(session, rt.now, rt.runtime().config, rt.planner_settings(), project_id, limits)
        rendered = render(project_id, rows)
        rt.audit(session, "quota.update", project_id, project_id, before, rendered)
    rt.runtime().wake_engine()
    return {"quota": rendered}

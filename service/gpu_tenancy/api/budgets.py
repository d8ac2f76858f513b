"""/v1/budgets: GPU-hours a project may use of a GPU model per period (every
calendar month, or a custom range), with what is used, planned and left now."""
from __future__ import annotations

from sqlalchemy.orm import Session

from flask import Blueprint, url_for
from flask.typing import ResponseReturnValue

from gpu_tenancy import error_codes as codes
from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.catalog import GPU_MODEL
from gpu_tenancy.api.scope import project_scope
from gpu_tenancy.api.validation import json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.budget import BudgetUse
from gpu_tenancy.engine import budgets
from gpu_tenancy.errors import NotFound
from gpu_tenancy.timeutil import rfc3339, time_field

bp = Blueprint("budgets", __name__, url_prefix="/v1/budgets")

TIME = {"type": "string", "minLength": 1, "maxLength": 64}
CREATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["budget"],
    "properties": {"budget": {
        "type": "object",
        "additionalProperties": False,
        "required": ["project_id", "gpu_model", "gpu_hours", "period"],
        "properties": {
            "project_id": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[^\x00-\x1f/]*$"},
            "gpu_model": GPU_MODEL,
            "gpu_hours": {"type": "number", "minimum": 0, "maximum": 1e9},
            "period": {"enum": ["month", "range"],
                       "description": "month: every calendar month (UTC); range: from start to end"},
            "start": {**TIME, "description": "RFC 3339; for a range"},
            "end": {**TIME, "description": "RFC 3339, after start; for a range"},
        },
    }},
}


def render_use(use: BudgetUse | None) -> dict | None:
    if use is None:
        return None
    return {"start": rfc3339(use.start), "end": rfc3339(use.end), "used": round(use.used, 4),
            "planned": round(use.planned, 4), "left": round(use.left, 4)}


def render(session: Session, row: m.Budget, now: int) -> dict:
    return {"id": row.id, "project_id": row.project_id, "gpu_model": row.gpu_model, "gpu_hours": row.gpu_hours,
            "period": row.period, "start": rfc3339(to_epoch(row.start_at)), "end": rfc3339(to_epoch(row.end_at)),
            "created_at": rfc3339(to_epoch(row.created_at)),
            "current": render_use(budgets.uses(session, row, now)),
            "links": [{"rel": "self", "href": url_for("budgets.show", budget_id=row.id, _external=True)}]}


def load(session: Session, budget_id: str) -> m.Budget:
    """A budget the caller may see; another project's budget does not exist for it (as a lease:
    api/leases.py), or a 403 for it and a 404 for an unknown id told which ids are budgets."""
    row = budgets.get(session, budget_id)
    if not rt.allowed("budget:show", row.project_id):
        raise NotFound(f"budget {budget_id[:36]!r} not found; GET /v1/budgets lists them",   # budgets.get's words
                       codes.BUDGET_NOT_FOUND)
    return row


@bp.get("")
def index() -> ResponseReturnValue:
    project = project_scope("budget:show", "budget:show:all_projects")
    with rt.transaction() as session:
        return {"budgets": [render(session, r, rt.now()) for r in budgets.listing(session, project)]}


@bp.get("/<budget_id>")
def show(budget_id: str) -> ResponseReturnValue:
    with rt.transaction() as session:
        return {"budget": render(session, load(session, budget_id), rt.now())}


@bp.post("")
def create() -> ResponseReturnValue:
    rt.authorize("budget:manage")
    body = json_body(CREATE)["budget"]
    rt.authorize("budget:manage", body["project_id"])   # the budget's project, for a rule that names one
    start = None if body.get("start") is None else time_field("start", body["start"])
    end = None if body.get("end") is None else time_field("end", body["end"])
    with rt.transaction() as session:
        row = budgets.add(session, rt.now(), body["project_id"], body["gpu_model"], body["gpu_hours"],
                          body["period"], start, end)
        rendered = render(session, row, rt.now())
        rt.audit(session, "budget.create", row.id, row.project_id, None, rendered)
    return {"budget": rendered}, 201, {"Location": rendered["links"][0]["href"]}


@bp.delete("/<budget_id>")
def delete(budget_id: str) -> ResponseReturnValue:
    rt.authorize("budget:manage")
    with rt.transaction() as session:
        row = load(session, budget_id)
        rt.authorize("budget:manage", row.project_id)   # the budget's project, for a rule that names one
        rt.audit(session, "budget.delete", row.id, row.project_id, render(session, row, rt.now()), None)
        session.delete(row)
    return "", 204

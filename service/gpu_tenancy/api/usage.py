"""/v1/usage: GPU-hours per project and GPU model over a time range."""
from __future__ import annotations

from flask import Blueprint

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.scope import project_scope
from gpu_tenancy.api.validation import query_window
from gpu_tenancy.api.budgets import render_use
from gpu_tenancy.engine import budgets, usage
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("usage", __name__, url_prefix="/v1/usage")

DEFAULT_SPAN = 30 * 86400


@bp.get("")
def show():
    project = project_scope("usage:show", "usage:show:all_projects")
    now = rt.now()
    start, end = query_window(default_span=DEFAULT_SPAN, now=now)
    with rt.transaction() as session:
        hours = usage.gpu_hours(session, start, end, now, project)
        spent = budgets.current_uses(session, now, project)
    projects = [{"project_id": project_id, "gpu_models": {model: {"gpu_hours": h} for model, h in models.items()},
                 "budgets": [{"id": row.id, "gpu_model": row.gpu_model, "gpu_hours": row.gpu_hours,
                              "period": row.period, "current": render_use(use)}
                             for row, use in spent.get(project_id, [])]}
                for project_id, models in hours.items()]
    return {"usage": {"start": rfc3339(start), "end": rfc3339(end), "projects": projects}}

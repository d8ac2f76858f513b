"""/v1/whatif: the policy what-if (admins). POST replays the last `days` days of leases under the
current settings and under the proposed `changes` (gpu_tenancy/whatif/changes.py), as a job: it
answers 202 at once; GET shows its progress, then both sides' figures."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, url_for
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import check_identifier, json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.engine import early_ends, whatif_history, whatif_jobs
from gpu_tenancy.timeutil import rfc3339
from gpu_tenancy.whatif.changes import MAX_CHANGES

bp = Blueprint("whatif", __name__, url_prefix="/v1/whatif")

CREATE: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["changes"],
    "properties": {
        "days": {"type": "number", "exclusiveMinimum": 0, "maximum": whatif_history.MAX_DAYS,
                 "description": "the history: leases asked for in this many days up to now (default 30)"},
        "changes": {"type": "array", "minItems": 1, "maxItems": MAX_CHANGES,
                    "items": {"type": "string", "minLength": 3, "maxLength": 300,
                              "pattern": r"^[^\x00-\x1f]*$"},
                    "description": "key=value: quota.<project>.<model>.{gpus,borrow_gpus,weight,max_duration}, "
                                   "weight.<project>, priority_class.<name>.priority, "
                                   "planner.{wait_bound,wait_bound_gpu_hours,wait_bound_leases,fairshare_half_life,"
                                   "age_size_gpu_hours,queued_charge,queued_charge_spares_gpus,empty_together}"},
    },
}
FIELDS = ("id", "status", "days", "changes", "leases", "progress", "created_by", "created_at", "updated_at",
          "finished_at", "error", "result", "links")


def render(row: m.WhatIfJob, with_result: bool = True) -> dict:
    return {"id": row.id, "status": row.status, "days": row.days, "changes": list(row.changes),
            "leases": row.leases, "progress": row.progress, "created_by": row.created_by,
            "created_at": rfc3339(to_epoch(row.created_at)), "updated_at": rfc3339(to_epoch(row.updated_at)),
            "finished_at": rfc3339(to_epoch(row.finished_at)) if row.finished_at else None,
            "error": row.error, "result": row.result if with_result else None,
            "links": [{"rel": "self", "href": url_for("whatif.show", job_id=row.id, _external=True)}]}


@bp.post("")
def create() -> ResponseReturnValue:
    rt.authorize("whatif:run")
    body = json_body(CREATE)
    run = rt.runtime()
    job_id, _ = whatif_jobs.start(run.sessions, run.clock, run.planner_settings, float(body.get("days", 30)),
                                  body["changes"], rt.caller().user_id, early_ends.settings(run.config))
    with rt.transaction() as session:
        return {"whatif": render(whatif_jobs.get(session, job_id))}, 202


@bp.get("")
def index() -> ResponseReturnValue:
    rt.authorize("whatif:show")
    with rt.transaction() as session:
        return {"whatifs": [render(r, with_result=False) for r in whatif_jobs.recent(session)]}


@bp.get("/<job_id>")
def show(job_id: str) -> ResponseReturnValue:
    rt.authorize("whatif:show")
    check_identifier("job_id", job_id)
    with rt.transaction() as session:
        return {"whatif": render(whatif_jobs.get(session, job_id))}

"""/v1/queue: everyone's waiting leases (Slurm's squeue), in planned order per GPU model.

Every reader sees the whole queue, so that "how many are ahead of me, and when do I
start" has an answer; another project's entries show their shape, place, ETA and
reason, but not the project, the lease's name or id (`queue:show:all_projects`,
admins by default, see everything). A page at a time (limit, marker, and the next page's
link), as the lease listing: the whole of a long queue was megabytes in one answer."""
from __future__ import annotations

from typing import Any


import re

from flask import Blueprint, request
from flask.typing import ResponseReturnValue
from sqlalchemy.orm import Session

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.catalog import GPU_MODEL
from gpu_tenancy.api.lease_view import start_by_now
from gpu_tenancy.api.validation import query_limit
from gpu_tenancy.domain.queue_reasons import anonymous, short_reason
from gpu_tenancy import error_codes as codes
from gpu_tenancy.engine import queue
from gpu_tenancy.engine.quotas import known_gpu_models
from gpu_tenancy.errors import BadRequest
from gpu_tenancy.timeutil import rfc3339, rfc3339_stored as stamp

bp = Blueprint("queue", __name__, url_prefix="/v1/queue")

OTHER_PROJECT = "another project"


def whose(project_id: str, shown: bool) -> dict:
    """The project keys of a queue or share row: named to those who may see it, else unnamed."""
    return {"project": project_id if shown else OTHER_PROJECT, "project_id": project_id if shown else None}
# the keys of an entry, in order: the QueueEntry schema of /v1/openapi.json is built from it
FIELDS = ("position", "gpu_model", "status", "project", "project_id", "lease_id", "name", "hidden", "shape",
          "gpus_per_instance", "instances", "gpus", "priority", "preemptible", "requested_start",
          "waiting_since", "eta", "start_by", "reason")


def query_gpu_model() -> str | None:
    """?gpu_model=, when given: a GPU model as the hosts name it."""
    model = request.args.get("gpu_model")
    if model is not None and not re.fullmatch(GPU_MODEL["pattern"], model):
        raise BadRequest("query parameter gpu_model must be a GPU model such as A100 (up to 64 letters, digits, "
                         "'.', '_' or '-')", "gpu_tenancy.invalid_query")
    return model


def check_gpu_model(session: Session, model: str | None) -> None:
    """A model filter names one of the cloud's GPU models: `h100` for H100 (the shapes are
    written in lower case) would otherwise list nothing, as if no lease waited."""
    if model is None:
        return
    known = known_gpu_models(session)
    if model not in known:
        raise BadRequest(f"unknown GPU model '{model}'; the cloud's GPU models are: "
                         f"{', '.join(sorted(known)) or 'none'}", codes.UNKNOWN_GPU_MODEL)


def render_entry(row: Any, shown: bool, now: int, charged: bool = False) -> dict:
    """`shown`: the caller may see whose lease it is (its project's own, or an admin; else no
    start-by either, whose margin tells how late that project's leases started); `now`: what the
    start-by is told from; `charged`: the planner's queued charge is on."""
    reason = short_reason(row.queue_reasons or [])
    if reason is not None:
        reason = {"code": reason["code"],
                  "message": reason["message"] if shown else anonymous(reason["code"], charged)}
    return {
        "position": row.queue_position,
        "gpu_model": row.gpu_model,
        "status": row.status,
        **whose(row.project_id, shown),
        "lease_id": row.id if shown else None,
        "name": row.name if shown else None,
        "hidden": not shown,
        "shape": row.shape,
        "gpus_per_instance": row.gpus_per_vm,
        "instances": row.instances,
        "gpus": row.gpus_per_vm * row.instances,
        "priority": row.priority,
        "preemptible": row.preemptible,
        "requested_start": stamp(row.earliest_start),
        "waiting_since": stamp(row.created_at),
        "eta": stamp(row.queue_eta),
        "start_by": start_by_now(row, now) if shown else None,
        "reason": reason,
    }


@bp.get("")
def show() -> ResponseReturnValue:
    rt.authorize("queue:show")
    model = query_gpu_model()
    everyone = rt.allowed("queue:show:all_projects")
    own = rt.context().project_id
    charged = rt.planner_settings().queued_charge is not None
    limit = query_limit(rt.runtime().config.max_page_size)
    given = request.args.get("marker")
    marker = queue.parse_marker(given) if given is not None else None
    with rt.read_transaction() as session:
        check_gpu_model(session, model)
        rows, more = queue.waiting(session, model, marker, limit)
    now = rt.now()
    body = {"now": rfc3339(now), "gpu_model": model,
            "leases": [render_entry(row, everyone or row.project_id == own, now, charged) for row in rows]}
    if more:
        body["leases_links"] = [{"rel": "next", "href": rt.next_href("queue.show", queue.marker_of(rows, marker))}]
    return {"queue": body}

"""/v1/share: fair-share standing (Slurm's sshare) per project and GPU model, ranked as
the planner orders equal-priority leases (engine/share.py; with the queued charge on, as it
would order each project's next lease).

Every reader sees every row, so that "why is the other lab first" has an answer (it
used fewer GPU-hours per unit of weight lately); another project's row keeps its
figures and rank but not its name (`share:show:all_projects`, admins by default,
see every name). Rows rather than only one's own rank: a rank alone does not say by
how much, nor how long until the others' use decays."""
from __future__ import annotations

import math

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.queue import check_gpu_model, query_gpu_model, whose
from gpu_tenancy.domain.standing import Standing
from gpu_tenancy.engine import share
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("share", __name__, url_prefix="/v1/share")

# the keys of a row, in order: the ShareRow schema of /v1/openapi.json is built from it
FIELDS = ("rank", "gpu_model", "project", "project_id", "hidden", "nominal_gpus", "borrow_gpus", "in_use_gpus",
          "borrowed_gpus", "decayed_gpu_hours", "weight", "score", "queued_charge", "waiting_leases")


def render_row(row: Standing, shown: bool, charged: bool = False) -> dict:
    """`charged`: the queued charge is on (its figure shown; null when off)."""
    return {
        "rank": row.rank,
        "gpu_model": row.gpu_model,
        **whose(row.project_id, shown),
        "hidden": not shown,
        "nominal_gpus": row.nominal,
        "borrow_gpus": row.borrow_limit,
        "in_use_gpus": row.in_use,
        "borrowed_gpus": row.borrowed,
        "decayed_gpu_hours": round(row.decayed_gpu_hours, 3),
        "weight": row.weight,
        "score": round(row.score, 6) if math.isfinite(row.score) else None,
        "queued_charge": round(row.charge, 6) if charged else None,
        "waiting_leases": row.waiting,
    }


def figures(row: Standing) -> tuple:
    """Every figure a row shows: rows of one rank that tie on some of them are still ordered by
    the others (a sort stable on the standings' order, by project id, would tell the ids' order)."""
    return (-row.nominal, -row.in_use, -row.decayed_gpu_hours, row.waiting, -row.borrow_limit, -row.borrowed,
            -row.weight, row.score, row.charge)


@bp.get("")
def show() -> ResponseReturnValue:
    rt.authorize("share:show")
    model = query_gpu_model()
    everyone = rt.allowed("share:show:all_projects")
    own = rt.context().project_id
    now, settings = rt.now(), rt.planner_settings()
    with rt.transaction() as session:
        check_gpu_model(session, model)
        rows = share.standings(session, now, settings, model)
    if not everyone:   # rows of one rank in the order of their figures: by project id would tell the ids' order
        rows.sort(key=lambda row: (row.gpu_model, row.rank, row.project_id != own, *figures(row)))
    return {"share": {"now": rfc3339(now), "gpu_model": model, "half_life": settings.fairshare_half_life,
                      "projects": [render_row(row, everyone or row.project_id == own,
                                              settings.queued_charge is not None) for row in rows]}}

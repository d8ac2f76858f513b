"""/v1/share: fair-share standing (Slurm's sshare) per project and GPU model, ranked as
the planner orders equal-priority leases (engine/share.py; with the queued charge on, as it
would order each project's next lease).

Every reader sees every row, so that "why is the other lab first" has an answer (it
used fewer GPU-hours per unit of weight lately); another project's row keeps its
figures and rank but not its name (`share:show:all_projects`, admins by default,
see every name). Rows rather than only one's own rank: a rank alone does not say by
how much, nor how long until the others' use decays.

Made at most once per engine tick (`engine_tick_seconds`) and replan in each API process
(StandingsCache): the answer's `now` says when, at most that long ago."""
from __future__ import annotations

import math
from dataclasses import dataclass

from flask import Blueprint
from flask.typing import ResponseReturnValue
from sqlalchemy.orm import Session

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.queue import check_gpu_model, query_gpu_model, whose
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.standing import Standing
from gpu_tenancy.engine import plan_insert, share
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


@dataclass
class StandingsCache:
    """Every model's standings, made at most once per replan (or lease fitted in) and per `max_age` s
    (the engine's tick): they are made from all the planner's inputs (every project's recent allocations and
    the whole queue: about 0.3 s of CPU at 1,000 waiting), so a tenant reading /v1/share in a
    loop costs one making per engine pass, not one per call. An answer is then up to `max_age`
    s old, never older than the last replan, and says when it was made (its `now`). Each app
    its own (Runtime.extras); the threads of a worker share it."""
    max_age: int
    # ((ledger generation, leases fitted in), made at, standings), swapped whole
    last: tuple[tuple[int, ...] | None, int, list[Standing]] | None = None

    def standings(self, session: Session, now: int, settings: PlannerSettings) -> tuple[int, list[Standing]]:
        """(made at, every model's standings)."""
        # read before the inputs: a replan committed between the two only makes the next call make them again.
        # A lease a create fitted into the plan (plan_insert.py) replans nothing and counts in `inserted`: a
        # project's waiting leases (and with the queued charge, the ranks) change with it too
        counts = session.execute(plan_insert.COUNTS).one_or_none()
        version = tuple(counts) if counts is not None else None
        last = self.last
        if last is not None and last[0] == version and 0 <= now - last[1] < self.max_age:
            return last[1], last[2]
        rows = share.standings(session, now, settings)
        self.last = (version, now, rows)
        return now, rows


def cache() -> StandingsCache:
    runtime = rt.runtime()
    made = runtime.extras.get("share")
    if made is None:
        made = runtime.extras["share"] = StandingsCache(max_age=runtime.config.engine_tick_seconds)
    return made


@bp.get("")
def show() -> ResponseReturnValue:
    rt.authorize("share:show")
    model = query_gpu_model()
    everyone = rt.allowed("share:show:all_projects")
    own = rt.context().project_id
    settings = rt.planner_settings()
    with rt.read_transaction() as session:   # a plan's inputs: read without SQLite's write lock
        check_gpu_model(session, model)
        now, every = cache().standings(session, rt.now(), settings)
    rows = [row for row in every if model is None or row.gpu_model == model]   # a new list: the cache's is shared
    if not everyone:   # rows of one rank in the order of their figures: by project id would tell the ids' order
        rows.sort(key=lambda row: (row.gpu_model, row.rank, row.project_id != own, *figures(row)))
    return {"share": {"now": rfc3339(now), "gpu_model": model, "half_life": settings.fairshare_half_life,
                      "projects": [render_row(row, everyone or row.project_id == own,
                                              settings.queued_charge is not None) for row in rows]}}

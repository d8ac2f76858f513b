"""Per-project, per-GPU-model limits: what admins set, and the replan it causes."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, utcnow_naive
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.engine import early_ends
from gpu_tenancy.errors import BadRequest
from gpu_tenancy.timeutil import duration_field

DEFAULTS = {"borrow_gpus": 0, "max_duration": None, "weight": 1.0}
MAX_DURATION = 10 * 365 * 86400


def of_projects(session: Session, project_id: str | None = None) -> dict[str, list[m.Quota]]:
    """Quota rows by project: one project's, or every project's (None)."""
    q = select(m.Quota).order_by(m.Quota.project_id, m.Quota.gpu_model)
    if project_id is not None:
        q = q.where(m.Quota.project_id == project_id)
    out: dict[str, list[m.Quota]] = defaultdict(list)
    if project_id is not None:
        out[project_id] = []
    for row in session.scalars(q):
        out[row.project_id].append(row)
    return dict(out)


def known_gpu_models(session: Session) -> set[str]:
    return set(session.scalars(select(m.Host.gpu_model))) | set(session.scalars(select(m.Shape.gpu_model)))


def replace(session: Session, clock: Callable[[], int], config: Config, settings: PlannerSettings, project_id: str,
            limits: dict[str, dict]) -> list[m.Quota]:
    """Set the project's limits for each GPU model given (omitted fields take
    their defaults; models not given are untouched), then replan: a raised
    quota can start waiting leases at once. The clock is read once the ledger lock is held: a
    request that waited there for a replan plans at the time it plans (its leases started then,
    not in the past by the wait). The caller commits."""
    known = known_gpu_models(session)
    unknown = sorted(set(limits) - known)
    if unknown:
        raise BadRequest(f"unknown GPU model(s) {', '.join(unknown)}; the cloud's GPU models are: "
                         f"{', '.join(sorted(known)) or 'none'}", "gpu_tenancy.unknown_gpu_model")
    ledger_lock(session)
    now = clock()
    stamp = utcnow_naive(now)
    for model, given in limits.items():
        values = {**DEFAULTS, **given}
        values["max_duration"] = max_duration_seconds(model, values["max_duration"])
        if not math.isfinite(values["weight"]):   # NaN: SQLite cannot store it, fair share cannot order by it
            raise BadRequest(f"gpu_models/{model}/weight must be a finite number", "gpu_tenancy.invalid_input")
        row = session.get(m.Quota, (project_id, model))
        if row is None:
            row = m.Quota(project_id=project_id, gpu_model=model)
            session.add(row)
        row.gpus, row.borrow_gpus, row.weight = values["gpus"], values["borrow_gpus"], float(values["weight"])
        row.max_duration, row.updated_at = values["max_duration"], stamp
    session.flush()
    early_ends.replan_at(session, now, config, settings, actor="quota")
    return of_projects(session, project_id)[project_id]


def max_duration_seconds(model: str, value: str | int | None) -> int | None:
    if value is None:
        return None
    seconds = duration_field(f"gpu_models/{model}/max_duration", value)
    if seconds > MAX_DURATION:   # as the schema bounds a number of seconds; the column is a 32-bit integer
        raise BadRequest(f"gpu_models/{model}/max_duration: at most {MAX_DURATION // 86400} days",
                         "gpu_tenancy.bad_duration")
    return seconds

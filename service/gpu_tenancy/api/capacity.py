"""/v1/capacity: GPUs per model now and, with ?start=&end=, each host's free GPUs over that window
(free: neither held nor planned for a waiting lease; planned: for waiting leases)."""
from __future__ import annotations

from typing import Any

from dataclasses import asdict

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import query_window
from gpu_tenancy.engine import capacity
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("capacity", __name__, url_prefix="/v1/capacity")

MAX_CALENDAR_SPAN = 90 * 86400


def render_host(entry: capacity.HostCalendar) -> dict:
    return {"host": entry.host, "gpu_model": entry.gpu_model, "gpus": entry.gpus, "in_service": entry.in_service,
            "free": [{"from": rfc3339(frm), "to": rfc3339(to), "free": free, "planned": planned}
                     for frm, to, free, planned in entry.free]}


@bp.get("")
def show() -> ResponseReturnValue:
    rt.authorize("capacity:show")
    now = rt.now()
    window = query_window(max_span=MAX_CALENDAR_SPAN, now=now)
    with rt.read_transaction() as session:   # the calendar may plan: without SQLite's write lock
        settings = rt.planner_settings()
        by_model = capacity.now_by_model(session, now, settings.release_floor)
        body: dict[str, Any] = {"now": rfc3339(now), "gpu_models": {model: asdict(figures) for model, figures in by_model.items()}}
        if window is not None:
            planned = rt.runtime().planned.planned_for_waiting(session, now, settings)
            body["calendar"] = [render_host(h) for h in capacity.calendar(session, *window, settings.release_floor,
                                                                          now=now, planned=planned)]
    return {"capacity": body}

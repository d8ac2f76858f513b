"""/v1/usage: GPU-hours per project, user and GPU model over a time range, rated with
the operator's price per GPU-hour (usage_prices) when one is set; as JSON or CSV."""
from __future__ import annotations

from typing import Any

import csv
import io

from flask import Blueprint, Response, request
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.budgets import render_use
from gpu_tenancy.api.scope import project_scope
from gpu_tenancy.api.validation import query_window
from gpu_tenancy.domain import rating
from gpu_tenancy.engine import budgets, usage
from gpu_tenancy.errors import BadRequest
from gpu_tenancy.csv_cells import safe_cell
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("usage", __name__, url_prefix="/v1/usage")

DEFAULT_SPAN = 30 * 86400
FORMATS = ("json", "csv")
CSV_FIELDS = ("start", "end", "project_id", "user_id", "gpu_model", "gpu_hours", "price_per_gpu_hour", "rated",
              "currency")


@bp.get("")
def show() -> ResponseReturnValue:
    project = project_scope("usage:show", "usage:show:all_projects")
    form = request.args.get("format", "json")
    if form not in FORMATS:
        raise BadRequest(f"format must be one of: {', '.join(FORMATS)}", "gpu_tenancy.invalid_query")
    now = rt.now()
    start, end = query_window(default_span=DEFAULT_SPAN, now=now)
    cfg = rt.runtime().config
    with rt.read_transaction() as session:   # a long window reads much: without SQLite's write lock
        hours, by_user = usage.figures(session, start, end, now, project)   # one read of the ledger
        spent = budgets.current_uses(session, now, project) if form == "json" else {}
    prices = cfg.usage_prices or {}
    if form == "csv":
        return as_csv(start, end, by_user, prices, cfg.usage_currency)
    projects: list[dict[str, Any]] = [{"project_id": project_id,
                 "gpu_models": {model: priced(h, prices, model) for model, h in models.items()},
                 "rated_total": rating.total(rating.rated(h, rating.price_of(prices, model))
                                             for model, h in models.items()),
                 "users": [render_user(user, user_models, prices)
                           for user, user_models in sorted(by_user.get(project_id, {}).items())],
                 "budgets": [{"id": row.id, "gpu_model": row.gpu_model, "gpu_hours": row.gpu_hours,
                              "period": row.period, "current": render_use(use)}
                             for row, use in spent.get(project_id, [])]}
                for project_id, models in hours.items()]
    return {"usage": {"start": rfc3339(start), "end": rfc3339(end), "currency": cfg.usage_currency,
                      "rated_total": rating.total(p["rated_total"] for p in projects), "projects": projects}}


def priced(gpu_hours: float, prices: dict, model: str) -> dict:
    price = rating.price_of(prices, model)
    return {"gpu_hours": gpu_hours, "price_per_gpu_hour": price, "rated": rating.rated(gpu_hours, price)}


def render_user(user_id: str, models: dict[str, float], prices: dict) -> dict:
    figures = {model: priced(h, prices, model) for model, h in models.items()}
    return {"user_id": user_id, "gpu_models": figures,
            "rated_total": rating.total(f["rated"] for f in figures.values())}


def as_csv(start: int, end: int, by_user: dict, prices: dict, currency: str | None) -> Response:
    """A row per project, user and GPU model: what a billing system imports."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    for project_id, users in sorted(by_user.items()):
        for user_id, models in sorted(users.items()):
            for model, h in sorted(models.items()):
                figures = priced(h, prices, model)
                writer.writerow([safe_cell(v) for v in (
                    rfc3339(start), rfc3339(end), project_id, user_id, model, h, figures["price_per_gpu_hour"],
                    figures["rated"], currency)])
    response = Response(out.getvalue(), mimetype="text/csv")
    response.headers["Content-Disposition"] = 'attachment; filename="usage.csv"'
    return response

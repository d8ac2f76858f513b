"""/v1/audit: who changed what through the API, when, from where, before and
after; for admins, as JSON or as CSV for export."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import csv
import io
import json
import re

from flask import Blueprint, Response, request
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import check_identifier, query_limit, query_time
from gpu_tenancy.csv_cells import safe_cell
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.engine import audit as audit_log
from gpu_tenancy.errors import BadRequest
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("audit", __name__, url_prefix="/v1/audit")

ACTIONS = audit_log.ACTIONS
FORMATS = ("json", "csv")
FIELDS = ("id", "at", "user_id", "user_project_id", "request_id", "remote_address", "action", "target_type",
          "target_id", "target_project_id", "before", "after", "outcome")
JSON_FIELDS = ("before", "after")
# filter -> what it matches; project_id is the target's project, as elsewhere in the API
ID_FILTERS = ("user_id", "project_id", "target_id")


def render(row: m.AuditRecord) -> dict:
    return {"id": row.id, "at": rfc3339(to_epoch(row.at)), "user_id": row.user_id,
            "user_project_id": row.user_project_id, "request_id": row.request_id,
            "remote_address": row.remote_address, "action": row.action, "target_type": row.target_type,
            "target_id": row.target_id, "target_project_id": row.target_project_id,
            "before": row.before, "after": row.after, "outcome": row.outcome}


@bp.get("")
def index() -> ResponseReturnValue:
    rt.authorize("audit:list")
    form = request.args.get("format", "json")
    if form not in FORMATS:
        raise BadRequest(f"format must be one of: {', '.join(FORMATS)}", "gpu_tenancy.invalid_query")
    limit = query_limit(rt.runtime().config.max_page_size)
    actions = request.args.getlist("action")
    for action in actions:
        if action not in ACTIONS:
            raise BadRequest(f"unknown action '{action[:64]}'; one of: {', '.join(ACTIONS)}",
                             "gpu_tenancy.invalid_query")
    ids = {name: check_identifier(name, value, 255) for name in ID_FILTERS
           if (value := request.args.get(name)) is not None}
    since, until = query_time("since"), query_time("until")
    with rt.transaction() as session:
        q = audit_log.query(actions, since=since, until=until, after_id=marker_id(session), **ids)
        rows = list(session.scalars(q.limit(limit + 1)))
        records = [render(r) for r in rows[:limit]]
    next_href = None
    if len(rows) > limit:
        next_href = rt.next_href("audit.index", str(records[-1]["id"]))
    if form == "csv":
        return as_csv(records, next_href)
    body = {"audit_records": records}
    if next_href:
        body["audit_records_links"] = [{"rel": "next", "href": next_href}]
    return body


def marker_id(session: Session) -> int | None:
    marker = request.args.get("marker")
    if marker is None:
        return None
    if not re.fullmatch(r"[0-9]{1,18}", marker) or not given(session, int(marker)):
        raise BadRequest(f"marker {marker[:64]} is not an audit record id", "gpu_tenancy.invalid_marker")
    return int(marker)


def given(session: Session, record_id: int) -> bool:
    """An id the record has given: `gpu-tenancy db purge` (db/purge.py) may have deleted the
    record since, and a reader that had paged up to it goes on after it (the newest is never
    purged, so every id given is at most the highest there)."""
    newest = session.scalar(select(func.max(m.AuditRecord.id)))
    return newest is not None and 0 < record_id <= newest


def as_csv(records: list[dict], next_href: str | None) -> Response:
    """One header row, then a row per record; before and after as JSON text. The
    next page, if any, is in the Link header (a CSV body has nowhere to say it)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(FIELDS)
    for record in records:
        writer.writerow([safe_cell(json.dumps(record[f]) if f in JSON_FIELDS else record[f]) for f in FIELDS])
    response = Response(out.getvalue(), mimetype="text/csv")
    response.headers["Content-Disposition"] = 'attachment; filename="audit.csv"'
    if next_href:
        response.headers["Link"] = f'<{next_href}>; rel="next"'
    return response

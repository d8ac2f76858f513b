"""/v1/priority_classes: the classes a lease may ask for (its order, preemptible
or not, and who may use it); everyone reads them, admins manage them."""
from __future__ import annotations

from typing import Any
import re

from flask import Blueprint, url_for
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.catalog import ENTRY_NAME
from gpu_tenancy.api.validation import check_identifier, json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.engine import priority_classes
from gpu_tenancy.errors import BadRequest
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("priority_classes", __name__, url_prefix="/v1/priority_classes")

PROJECT = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[^\x00-\x1f/]*$"}
FIELDS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["priority"],
    "properties": {
        "priority": {"type": "integer", "minimum": -100, "maximum": 100,
                     "description": "the order: higher goes first"},
        "preemptible": {"type": "boolean", "description": "any size, outside quota, on idle GPUs only, ended "
                                                          "with notice when needed (default false)"},
        "projects": {"oneOf": [{"type": "array", "items": PROJECT, "maxItems": 1000, "uniqueItems": True},
                               {"type": "null"}],
                     "description": "the projects that may use it; null (the default) for every project"},
        "description": {"type": "string", "maxLength": 512, "pattern": r"^[^\x00-\x08\x0b-\x1f]*$"},
    },
}
NAME_RE = re.compile(ENTRY_NAME["pattern"])
UPDATE = {"type": "object", "additionalProperties": False, "required": ["priority_class"],
          "properties": {"priority_class": FIELDS}}


def render(row: m.PriorityClass, shown_to: str | None = None) -> dict:
    """`shown_to`: a member's project, who sees of the projects allowed only its own (null: every
    project may use the class; [] : not this one), not which other projects may."""
    projects = row.projects
    if shown_to is not None and projects is not None:
        projects = [p for p in projects if p == shown_to]
    return {"name": row.name, "priority": row.priority, "preemptible": row.preemptible, "projects": projects,
            "description": row.description, "updated_at": rfc3339(to_epoch(row.updated_at)),
            "links": [{"rel": "self", "href": url_for("priority_classes.show", name=row.name, _external=True)}]}


@bp.get("")
def index() -> ResponseReturnValue:
    rt.authorize("priority_class:list")
    with rt.transaction() as session:
        return {"priority_classes": [render(r, viewer()) for r in priority_classes.listing(session)]}


@bp.get("/<name>")
def show(name: str) -> ResponseReturnValue:
    rt.authorize("priority_class:list")
    with rt.transaction() as session:
        return {"priority_class": render(priority_classes.get(session, name), viewer())}


def viewer() -> str | None:
    """None for an operator (every project allowed is shown), else the caller's project."""
    return None if rt.is_admin() else rt.context().project_id


@bp.put("/<name>")
def update(name: str) -> ResponseReturnValue:
    rt.authorize("priority_class:manage")
    check_identifier("name", name)
    if not NAME_RE.fullmatch(name):
        raise BadRequest("a priority class name is lower-case letters, digits, '.', '_' and '-', "
                         "at most 64 characters", "gpu_tenancy.invalid_identifier")
    body = json_body(UPDATE)["priority_class"]
    with rt.transaction() as session:
        existing = session.get(m.PriorityClass, name)
        before = render(existing) if existing is not None else None
        after = render(priority_classes.put(session, rt.now(), name, body))
        rt.audit(session, "priority_class.update", name, None, before, after)
    return {"priority_class": after}


@bp.delete("/<name>")
def delete(name: str) -> ResponseReturnValue:
    """Leases already asked for keep the priority they copied."""
    rt.authorize("priority_class:manage")
    with rt.transaction() as session:
        before = render(priority_classes.get(session, name))
        priority_classes.delete(session, name)
        rt.audit(session, "priority_class.delete", name, None, before, None)
    return "", 204


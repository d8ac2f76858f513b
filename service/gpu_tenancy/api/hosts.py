"""/v1/hosts: the GPU hosts, their state and GPUs in use; admins drain and undrain them."""
from __future__ import annotations

from sqlalchemy.orm import Session

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import check_identifier, json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.engine import hosts
from gpu_tenancy.errors import NotFound
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("hosts", __name__, url_prefix="/v1/hosts")

UPDATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["drained"],
    "properties": {"drained": {"type": "boolean",
                               "description": "true: take no new leases; running ones run to their end, "
                                              "planned ones move to other hosts"}},
}


def render(row: m.Host, in_use: dict[str, int], held_until: dict[str, int]) -> dict:
    return {"name": row.name, "gpu_model": row.gpu_model, "gpus": row.gpus, "in_use": in_use.get(row.name, 0),
            "held_until": rfc3339(held_until.get(row.name)),
            "up": row.up, "enabled": row.enabled, "drained": row.drained,
            "in_service": row.up and row.enabled and not row.drained, "aggregate": row.aggregate,
            "reported_at": rfc3339(to_epoch(row.updated_at))}


def load(session: Session, name: str) -> m.Host:
    row = hosts.find(session, check_identifier("host name", name, 255))
    if row is None:
        raise NotFound(f"no GPU host named {name[:64]!r}", "gpu_tenancy.host_not_found")
    return row


def in_use_and_held(session: Session) -> tuple[dict[str, int], dict[str, int]]:
    """Each host's GPUs in use now, and when its last lease's GPUs are expected back."""
    now, floor = rt.now(), rt.planner_settings().release_floor
    return hosts.in_use_now(session, now, floor), hosts.held_until(session, now, floor)


@bp.get("")
def index() -> ResponseReturnValue:
    rt.authorize("host:list")
    with rt.transaction() as session:
        in_use, held = in_use_and_held(session)
        return {"hosts": [render(row, in_use, held) for row in hosts.listing(session)]}


@bp.get("/<name>")
def show(name: str) -> ResponseReturnValue:
    rt.authorize("host:list")
    with rt.transaction() as session:
        return {"host": render(load(session, name), *in_use_and_held(session))}


@bp.patch("/<name>")
def update(name: str) -> ResponseReturnValue:
    rt.authorize("host:update")
    body = json_body(UPDATE)
    with rt.transaction() as session:
        row = load(session, name)
        in_use, held = in_use_and_held(session)
        before = render(row, in_use, held)
        hosts.set_drained(session, row, body["drained"], rt.now, rt.runtime().config, rt.planner_settings(),
                          rt.context().user_id or "admin")
        rendered = render(row, in_use, hosts.held_until(session, rt.now(), rt.planner_settings().release_floor))
        rt.audit(session, "host.update", row.name, None, before, rendered)
    rt.runtime().wake_engine()
    return {"host": rendered}

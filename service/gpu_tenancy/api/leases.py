"""/v1/leases: ask for GPUs, see where you stand in the queue, extend, cancel."""
from __future__ import annotations

import logging

from flask import Blueprint, request, url_for
from sqlalchemy import select

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.lease_view import for_tenant, page, render
from gpu_tenancy.api.validation import json_body, query_int
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import audit as audit_log, leases, ledger, networking, volumes
from gpu_tenancy.engine.decision_hook import DecisionHook, decide
from gpu_tenancy.errors import BadRequest, NotFound
from gpu_tenancy.guest.readiness_probe import readiness_url
from gpu_tenancy.timeutil import rfc3339

log = logging.getLogger(__name__)
bp = Blueprint("leases", __name__, url_prefix="/v1/leases")

NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f]*$"}
TIME = {"type": "string", "minLength": 1, "maxLength": 64}
DURATION = {"oneOf": [{"type": "string", "minLength": 2, "maxLength": 64},
                      {"type": "integer", "minimum": 1, "maximum": 10 * 365 * 86400}],
            "description": "ISO 8601 (PT24H, P2D), a number with a unit (24h, 90m, 7d), Slurm's "
                           "[D-]HH:MM:SS (1-00:00:00), or whole seconds, at least 60"}

CREATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["shape", "duration"],
    "properties": {
        "name": NAME,
        "shape": {"type": "string", "minLength": 1, "maxLength": 64},
        "instances": {"type": "integer", "minimum": 1, "maximum": 1000},
        "start": TIME,
        "duration": DURATION,
        "latest_start": TIME,
        "image": {"type": "string", "minLength": 1, "maxLength": 128},
        "volume": {"oneOf": [
            {"type": "object", "additionalProperties": False, "required": ["size_gb"],
             "properties": {"size_gb": {"type": "integer", "minimum": 1, "maximum": 65536}}},
            {"type": "object", "additionalProperties": False, "required": ["id"],
             "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 64}}}]},
        "key_name": {"type": "string", "minLength": 1, "maxLength": 255},
        "user_data": {"type": "string", "maxLength": 65535},
        "priority": {"type": "integer", "minimum": -100, "maximum": 100},
        "priority_class": {"type": "string", "minLength": 1, "maxLength": 64,
                           "description": "a class of GET /v1/priority_classes (instead of priority)"},
        "readiness_probe": {"type": "boolean", "description": "the VMs run the GPU readiness probe at first "
                                                              "boot; the lease is ready once each reports"},
        "boot": {"type": "string", "enum": ["service", "tenant"],
                 "description": "service (default): the service boots the VMs with the standard image; "
                                "tenant: the service boots nothing, the project's members boot up to "
                                "`instances` servers with the lease's flavor while it is active"},
        "network": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f]*$",
                    "description": "id or name of a network the project can use (default: its only "
                                   "network, else the operator's default, else one made for it)"},
        "floating_ip": {"type": "boolean", "description": "each VM gets a floating IP from the external network"},
    },
}

UPDATE = {
    "type": "object",
    "additionalProperties": False,
    # a new end or a new duration, not both; `shrink` only beside one of them
    "oneOf": [{"required": ["end"], "not": {"required": ["duration"]}},
              {"required": ["duration"], "not": {"required": ["end"]}}],
    "properties": {"end": TIME, "duration": DURATION,
                   "shrink": {"type": "boolean", "description": "the change may make the lease shorter (without "
                                                                "it, a change that would is refused: 409)"}},
}

STATUSES = [s.value for s in LeaseState]


def render_preview(request_, columns, planned, now: int, network: networking.Choice) -> dict:
    place = planned.placement
    starts_now = place is not None and place.start <= now   # it would be scheduled, not queued: no place
    return {
        "id": None, "name": columns["name"] if request_.name else None, "status": "preview",
        "shape": columns["shape"], "gpu_model": request_.gpu_model,
        "gpus_per_instance": request_.gpus_per_vm, "instances": request_.instances,
        "duration": request_.duration, "image": columns["image"],
        "start": rfc3339(place.start) if place else None, "end": rfc3339(place.end) if place else None,
        "borrowing": planned.borrowing,
        "queue": {"position": None if starts_now else planned.position,
                  "eta": None if starts_now else rfc3339(planned.eta),
                  "reasons": [{"code": r.code, "message": r.message} for r in planned.reasons]},
        "allocations": [{"instance": i, "host": h} for i, h in enumerate(place.hosts)] if place else [],
        "boot": columns["boot"], "network": network.render(), "floating_ip": network.floating_ip,
    }


def load(session, lease_id: str) -> m.Lease:
    """A lease the caller may see; another project's lease does not exist for it."""
    row = load_any(session, lease_id)
    if not rt.allowed("lease:show", row.project_id):
        raise NotFound(f"lease {lease_id[:36]!r} not found", "gpu_tenancy.lease_not_found")
    return row


def load_any(session, lease_id: str) -> m.Lease:
    """A lease by id, whoever asks (the caller's rights are checked after)."""
    # ids are uuids: anything longer or unprintable (PostgreSQL refuses NUL) names no lease
    row = session.get(m.Lease, lease_id) if len(lease_id) <= 36 and lease_id.isprintable() else None
    if row is None:
        raise NotFound(f"lease {lease_id[:36]!r} not found", "gpu_tenancy.lease_not_found")
    return row


@bp.post("")
def create():
    rt.authorize("lease:create")
    body = json_body(CREATE)
    dry_run = request.args.get("dry_run", "false").lower()
    if dry_run not in ("true", "false", "1", "0"):
        raise BadRequest("dry_run must be true or false", "gpu_tenancy.invalid_query")
    cfg = rt.runtime().config
    if body.get("boot") == "tenant":   # before any check of what it does not use
        leases.check_tenant_boot(body)
    if body.get("readiness_probe") and not cfg.readiness_url:
        raise BadRequest("this service has no readiness_url configured, so VMs could not report their "
                         "GPU readiness; ask without readiness_probe", "gpu_tenancy.readiness_unavailable")
    if (body.get("volume") or {}).get("id"):   # asked of the cloud before any transaction is open
        volumes.check_owned(rt.runtime().cloud_driver(), rt.context().project_id, body["volume"]["id"],
                            rt.is_admin())
    network = (networking.Choice() if body.get("boot") == "tenant"   # the tenant's servers pick their own
               else networking.choose(rt.runtime().cloud_driver(), rt.context().project_id, body, rt.is_admin()))
    if dry_run in ("true", "1"):
        with rt.transaction() as session:
            req, columns, planned = leases.preview(session, rt.now(), rt.planner_settings(), rt.limits(),
                                                   rt.caller(), body)
            return {"lease": render_preview(req, columns, planned, rt.now(), network)}, 200
    lease_id = ledger.new_lease_id()   # the same in the question to the decision service and in the lease

    def make(session, hook):
        row = leases.create(session, rt.now(), rt.limits(), rt.caller(), body, hook, lease_id)
        network.apply(row)
        rendered = render(row)
        # committed with the lease, so that no lease is ever without its record
        return row, rendered, rt.audit(session, "lease.create", row.id, row.project_id, None, rendered)
    row, rendered, record = decide(DecisionHook.from_config(cfg), rt.transaction, make)
    rendered = plan_created(row, record.id) or rendered   # the record's id is known once committed
    if row.readiness_probe:  # shown this once (not in the audit record), for VMs made by hand or Heat
        rendered = {**rendered, "readiness": {**rendered["readiness"], "token": row.readiness_token,
                                              "url": readiness_url(cfg.readiness_url, row.id)}}
    rt.runtime().wake_engine()
    return {"lease": rendered}, 201, {"Location": rendered["links"][0]["href"]}


def plan_created(row: m.Lease, record_id: int) -> dict | None:
    """The committed lease, planned (ledger.plan_new), as the answer shows it, and its
    audit record brought up to that. None if planning failed: the lease stays queued,
    and the engine's next replan plans it (the answer still tells it was made).

    The ledger lock is held only for the replan and its write: the answer is rendered
    once that transaction has committed (its objects stay loaded), and the record is
    amended in a transaction of its own, while other requests replan."""
    try:
        with rt.transaction() as session:
            planned = ledger.plan_new(session, rt.now(), rt.planner_settings(), row.id)
    except Exception:
        log.exception("planning lease %s failed; it waits for the engine's replan", row.id)
        return None
    rendered = render(planned)
    try:
        with rt.transaction() as session:
            audit_log.amend_after(session, record_id, rendered)
    except Exception:   # the lease is planned all the same; only its record tells the lease as asked for
        log.exception("amending the audit record of lease %s failed", row.id)
    return rendered


@bp.get("")
def index():
    rt.authorize("lease:list")
    limit = query_int("limit", 100, 1, rt.runtime().config.max_page_size)
    status = request.args.getlist("status")
    for s in status:
        if s not in STATUSES:
            raise BadRequest(f"unknown status '{s}'; one of: {', '.join(STATUSES)}", "gpu_tenancy.invalid_query")
    project = request.args.get("project_id")
    if rt.is_admin():
        if request.args.get("all_projects", "").lower() in ("1", "true"):
            project = None
        elif project is None:
            project = rt.context().project_id
    else:   # asking for every project, or another one, is refused rather than quietly narrowed
        if project not in (None, rt.context().project_id) or request.args.get("all_projects"):
            rt.authorize("lease:list:all_projects")
        project = rt.context().project_id
    with rt.transaction() as session:
        rendered, more = page(session, project, status, request.args.get("marker"), limit)
        body = {"leases": rendered}
    if more:
        args = {k: v for k, v in request.args.items() if k != "marker"}
        body["leases_links"] = [{"rel": "next", "href": url_for("leases.index", marker=rendered[-1]["id"],
                                                                 _external=True, **args)}]
    return body


@bp.get("/<lease_id>")
def show(lease_id: str):
    with rt.transaction() as session:
        return {"lease": render(load(session, lease_id))}


@bp.get("/<lease_id>/events")
def events(lease_id: str):
    with rt.transaction() as session:
        load(session, lease_id)
        rows = session.scalars(select(m.Event).where(m.Event.lease_id == lease_id).order_by(m.Event.id))
        text = (lambda message: message) if rt.is_admin() else for_tenant   # the cloud's words: operators'
        return {"events": [{"at": rfc3339(to_epoch(e.at)), "actor": e.actor, "kind": e.kind,
                            "from": e.from_state, "to": e.to_state, "message": text(e.message)} for e in rows]}


@bp.patch("/<lease_id>")
def update(lease_id: str):
    body = json_body(UPDATE)
    cfg = rt.runtime().config

    def change(session, hook):
        row = load(session, lease_id)
        rt.authorize("lease:update", row.project_id)
        before = render(row)
        leases.change_end(session, rt.now(), rt.planner_settings(), rt.limits(), row, body, rt.context().user_id,
                          cfg.extension_window_seconds, hook)
        rendered = render(row)
        rt.audit(session, "lease.update", row.id, row.project_id, before, rendered)
        return rendered
    rendered = decide(DecisionHook.from_config(cfg), rt.transaction, change)
    rt.runtime().wake_engine()
    return {"lease": rendered}


@bp.delete("/<lease_id>")
def cancel(lease_id: str):
    cfg = rt.runtime().config

    def end(session, hook):
        row = load(session, lease_id)
        rt.authorize("lease:delete", row.project_id)
        before = render(row)
        leases.cancel(session, rt.now(), rt.planner_settings(), row, rt.context().user_id, hook)
        rt.audit(session, "lease.delete", row.id, row.project_id, before, render(row))
    decide(DecisionHook.from_config(cfg), rt.transaction, end)
    rt.runtime().wake_engine()
    return "", 204

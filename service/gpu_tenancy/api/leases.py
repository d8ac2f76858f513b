"""/v1/leases: ask for GPUs, see where you stand in the queue, extend, cancel."""
from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from sqlalchemy.orm import Session

from gpu_tenancy.domain.model import LeaseRequest, PlannedLease

from flask import Blueprint, request
from flask.typing import ResponseReturnValue

from gpu_tenancy import error_codes as codes
from gpu_tenancy.api import dry_runs, event_markers, offer_view, runtime as rt
from gpu_tenancy.api.lease_commands import CREATE, UPDATE, end_change, lease_ask
from gpu_tenancy.api.lease_view import for_tenant, page, render
from gpu_tenancy.api.validation import json_body, query_bool, query_limit
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.lease_ask import EndChange
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import (early_ends, events as lease_events, leases, networking, new_lease, offers,
                                resume as lease_resume)
from gpu_tenancy.engine.decision_hook import DecisionHook, decide
from gpu_tenancy.errors import BadRequest, Forbidden, NotFound
from gpu_tenancy.guest.readiness_probe import readiness_url
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("leases", __name__, url_prefix="/v1/leases")
__all__ = ["CREATE", "UPDATE", "bp"]   # the request schemas, for the OpenAPI document

STATUSES = [s.value for s in LeaseState]


def render_preview(request_: LeaseRequest, columns: dict, planned: PlannedLease, now: int,
                   network: networking.Choice) -> dict:
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


def load(session: Session, lease_id: str) -> m.Lease:
    """A lease the caller may see; another project's lease does not exist for it."""
    row = load_any(session, lease_id)
    if not rt.allowed("lease:show", row.project_id):
        raise not_found(lease_id)
    return row


def load_any(session: Session, lease_id: str) -> m.Lease:
    """A lease by id, whoever asks (the caller's rights are checked after)."""
    # ids are uuids: anything longer or unprintable (PostgreSQL refuses NUL) names no lease
    row = session.get(m.Lease, lease_id) if len(lease_id) <= 36 and lease_id.isprintable() else None
    if row is None:
        raise not_found(lease_id)
    return row


def not_found(lease_id: str) -> NotFound:
    return NotFound(f"lease {lease_id[:36]!r} not found", codes.LEASE_NOT_FOUND)


def refuse_secret(row: m.Lease, lease_id: str, refusal: Forbidden) -> NoReturn:
    """A lease's secret (X-Lease-Token) that is not its own: `refusal` to a sender who may see
    the lease (a member of its project); to anyone else, the lease does not exist, as for an id
    that names none, or a guessed secret on any id tells which leases there are."""
    raise refusal if confirmed_identity() and rt.allowed("lease:show", row.project_id) else not_found(lease_id)


def confirmed_identity() -> bool:
    """A token's identity: the routes a lease's VMs call take requests without one."""
    return request.environ.get("HTTP_X_IDENTITY_STATUS") == "Confirmed" and bool(rt.context().project_id)


@bp.post("")
def create() -> ResponseReturnValue:
    rt.authorize("lease:create")
    ask = lease_ask(json_body(CREATE))
    dry_run = query_bool("dry_run")
    cfg, caller = rt.runtime().config, rt.caller()
    if dry_run:   # before the cloud is asked and the queue planned
        dry_runs.take(caller.project_id)
    network = new_lease.check_with_cloud(rt.runtime().cloud_driver, caller, ask, bool(cfg.readiness_url))
    if dry_run:   # a plan of the whole queue, which writes nothing: without SQLite's write lock
        with rt.read_transaction() as session:
            shown = offers.preview(session, rt.now(), rt.planner_settings(), rt.limits(), rt.runtime().offers,
                                   caller, ask)
            return {"lease": render_preview(shown.request, shown.columns, shown.planned, rt.now(), network),
                    "offers": offer_view.render_all(shown.offers)}, 200

    def audit(session: Session, row: m.Lease, rendered: dict) -> m.AuditRecord:
        return rt.audit(session, "lease.create", row.id, row.project_id, None, rendered)
    def replacing(session: Session, row: m.Lease) -> Callable[[], object]:
        """An offer taken that replaces a waiting lease cancels it: as a cancel, by its rule and audited."""
        rt.authorize("lease:delete", row.project_id)
        before = render(row)
        return lambda: rt.audit(session, "lease.delete", row.id, row.project_id, before, render(row))
    made, alternatives = offers.make(rt.transaction, rt.now, cfg, rt.planner_settings(), rt.limits(),
                                     rt.runtime().offers, caller, ask, network, DecisionHook.from_config(cfg),
                                     render, audit, rt.runtime().fits, replacing)
    rendered = made.rendered
    if made.row.readiness_probe:  # shown this once (not in the audit record), for VMs made by hand or Heat
        assert cfg.readiness_url is not None   # new_lease refuses a probe without it
        rendered = {**rendered, "readiness": {**rendered["readiness"], "token": made.row.readiness_token,
                                              "url": readiness_url(cfg.readiness_url, made.row.id)}}
    rt.runtime().wake_engine(can_wait=made.fitted)   # fitted: nothing starts before the replan
    return ({"lease": rendered, "offers": offer_view.render_all(alternatives)}, 201,
            {"Location": rendered["links"][0]["href"]})


@bp.get("")
def index() -> ResponseReturnValue:
    rt.authorize("lease:list")
    limit = query_limit(rt.runtime().config.max_page_size)
    newest_first = query_sort_dir()   # by creation, then id
    status = request.args.getlist("status")
    for s in status:
        if s not in STATUSES:
            raise BadRequest(f"unknown status '{s[:64]}'; one of: {', '.join(STATUSES)}", codes.INVALID_QUERY)
    project, everyone = request.args.get("project_id"), query_bool("all_projects")
    if everyone or project not in (None, rt.context().project_id):
        # every project's, or another's: as the rule says (an admin's by default), refused rather
        # than quietly narrowed; and given as asked to whoever the operator grants it
        rt.authorize("lease:list:all_projects")
        # a project named with all_projects narrows it, as OpenStack's listings read the two
        # (`openstack gpu lease list --all-projects --project X` sends both)
    else:
        project = rt.context().project_id
    with rt.read_transaction() as session:
        rendered, more = page(session, project, status, request.args.get("marker"), limit, newest_first)
        body = {"leases": rendered}
    if more:
        body["leases_links"] = [{"rel": "next", "href": rt.next_href("leases.index", rendered[-1]["id"])}]
    return body


@bp.get("/<lease_id>")
def show(lease_id: str) -> ResponseReturnValue:
    with rt.transaction() as session:
        return {"lease": render(load(session, lease_id))}


@bp.get("/<lease_id>/events")
def events(lease_id: str) -> ResponseReturnValue:
    """A page of the lease's events (limit, marker, sort_dir as the listing). The next link's
    marker is where this page ended, sealed (api/event_markers.py): an event's id counts every
    lease's events, so two would tell how busy other projects were. A count is a marker too."""
    limit = query_limit(rt.runtime().config.max_page_size)
    newest_first = query_sort_dir()
    key = rt.runtime().event_marker_key
    start = event_markers.place(key, lease_id, newest_first, request.args.get("marker"))
    with rt.read_transaction() as session:   # a long history's deep page reads much: without SQLite's write lock
        load(session, lease_id)
        rows, more = lease_events.of_lease(session, lease_id, start.skip, limit, newest_first, start.after)
        text = (lambda message: message) if rt.is_admin() else for_tenant   # the cloud's words: operators'
        body: dict = {"events": [{"at": rfc3339(to_epoch(e.at)), "actor": e.actor, "kind": e.kind,
                                  "from": e.from_state, "to": e.to_state, "message": text(e.message)} for e in rows]}
    if more:
        marker = event_markers.seal(key, lease_id, newest_first, rows[-1].id)
        body["events_links"] = [{"rel": "next", "href": rt.next_href("leases.events", marker, lease_id=lease_id)}]
    return body


def query_sort_dir() -> bool:
    """?sort_dir=: whether newest first."""
    sort_dir = request.args.get("sort_dir", "asc")   # OpenStack's word
    if sort_dir not in ("asc", "desc"):
        raise BadRequest("sort_dir is asc (oldest first, the default) or desc (newest first)", codes.INVALID_QUERY)
    return sort_dir == "desc"


@bp.patch("/<lease_id>")
def update(lease_id: str) -> ResponseReturnValue:
    rendered, placed = change_end(lease_id, end_change(json_body(UPDATE)))
    rt.runtime().wake_engine(can_wait=placed)
    return {"lease": rendered}


@bp.delete("/<lease_id>")
def cancel(lease_id: str) -> ResponseReturnValue:
    rt.runtime().wake_engine(can_wait=end_lease(lease_id))
    return "", 204


@bp.post("/<lease_id>/resume")
def resume(lease_id: str) -> ResponseReturnValue:
    """A parked lease back: sooner than its held slot if that delays nobody (engine/resume.py)."""
    cfg = rt.runtime().config
    with rt.transaction() as session:
        row = load(session, lease_id)
        rt.authorize("lease:resume", row.project_id)
        leases.lock_for_change(session, row)   # the lease as it is, until this commits
        before = render(row)
        now = rt.now()
        lease_resume.resume_early(session, now, rt.planner_settings(), row, rt.context().user_id or "")
        session.flush()
        early_ends.replan_at(session, now, cfg, rt.planner_settings())
        rendered = render(row)
        rt.audit(session, "lease.resume", row.id, row.project_id, before, rendered)
    rt.runtime().wake_engine()
    return {"lease": rendered}


def change_end(lease_id: str, change_asked: EndChange, name: str | None = None) -> tuple[dict, bool]:
    """A lease's new end (authorized, audited, asked of the decision service); the lease
    as rendered after, and whether it was placed in the plan as it stands (leases.change_end: the
    engine's replan may wait). Also the Blazar API's (api/blazar/leases.py), whose update may rename
    the lease too (`name`): in the same transaction, so that a taken name leaves the end as it was."""
    cfg = rt.runtime().config

    def change(session: Session, hook: DecisionHook) -> tuple[dict, bool]:
        row = load(session, lease_id)
        rt.authorize("lease:update", row.project_id)
        if name is not None:   # the name's lock before the ledger's
            leases.name_lock(session, row.project_id, name)
        leases.lock_for_change(session, row)   # the lease as it is, until this commits
        before = render(row)
        if name is not None:
            leases.rename(session, rt.now(), row, name, rt.caller().user_id)
        placed = leases.change_end(session, rt.now(), cfg, rt.planner_settings(), rt.limits(), row, change_asked,
                                   rt.caller().user_id, cfg.extension_window_seconds, hook, rt.runtime().fits)
        rendered = render(row)
        rt.audit(session, "lease.update", row.id, row.project_id, before, rendered)
        return rendered, placed
    return decide(DecisionHook.from_config(cfg), rt.transaction, change)


def rename(lease_id: str, name: str) -> None:
    """A lease's new name (authorized as an update, audited). The Blazar API's: Blazar renames
    a lease in any state."""
    with rt.transaction() as session:
        row = load(session, lease_id)
        rt.authorize("lease:update", row.project_id)
        leases.name_lock(session, row.project_id, name)   # before the ledger's
        leases.lock_for_change(session, row)   # the lease as it is, until this commits
        before = render(row)
        leases.rename(session, rt.now(), row, name, rt.caller().user_id)
        rt.audit(session, "lease.update", row.id, row.project_id, before, render(row))


def end_lease(lease_id: str, undo: bool = False, name: str | None = None) -> bool:
    """Cancel a waiting lease or end a running one (authorized, audited, asked of the
    decision service); whether it was only taken out of the plan (leases.cancel: the engine's
    replan may wait). Also the Blazar API's. `undo`: the service takes back a lease this very
    request made (api/blazar/leases.py: create), neither the caller's cancel to authorize nor
    an end to ask the decision service about: whoever may make a lease, no lease is left behind.
    `name`: the Blazar API's update that also renames the lease (authorized as an update by its
    caller): in the same transaction, so that an end refused leaves the name as it was."""
    cfg = rt.runtime().config

    def end(session: Session, hook: DecisionHook) -> bool:
        # the lease undone is the one this request made, whether or not its caller may read it
        row = load_any(session, lease_id) if undo else load(session, lease_id)
        if not undo:
            rt.authorize("lease:delete", row.project_id)
        if name is not None:   # the name's lock before the ledger's
            leases.name_lock(session, row.project_id, name)
        leases.lock_for_change(session, row)   # the lease as it is, until this commits
        before = render(row)
        if name is not None:
            leases.rename(session, rt.now(), row, name, rt.caller().user_id)
        taken_out = leases.cancel(session, rt.now(), cfg, rt.planner_settings(), row, rt.caller().user_id, hook,
                                  rt.runtime().fits)
        rt.audit(session, "lease.delete", row.id, row.project_id, before, render(row))
        return taken_out
    return decide(DecisionHook() if undo else DecisionHook.from_config(cfg), rt.transaction, end)

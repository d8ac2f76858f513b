"""/reservation/v1/leases: Blazar's lease calls on gpu-tenancy's leases. The handlers
read Blazar's body (asks.py), call what the native API calls (engine/new_lease.py,
api/leases.py's change_end and end_lease, under the same policy rules), and answer
in Blazar's form (view.py).

Where Blazar would refuse and gpu-tenancy would queue (no GPUs free for the asked
window), `blazar_when_queued` chooses: `refuse` (the default) answers 409 "Not enough
hosts available", as Blazar refuses such a lease (its own answer is a 500 with these
words), because Blazar's clients take a lease for its asked window; `pending` accepts
it, shown PENDING with the start the queue plans (`gpu_tenancy_status`: queued)."""
from __future__ import annotations

from sqlalchemy.orm import Session

from gpu_tenancy.engine.leases import Caller

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy import error_codes as codes
from gpu_tenancy.api import leases as native, runtime as rt
from gpu_tenancy.api.blazar import asks, errors, view
from gpu_tenancy.api.lease_view import render as render_native
from gpu_tenancy.api.validation import parse_json, refuse_nul
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.model import PlannedLease
from gpu_tenancy.domain.lease_ask import LeaseAsk
from gpu_tenancy.domain.states import FINAL, LeaseState
from gpu_tenancy.engine import leases, ledger, new_lease
from gpu_tenancy.engine.decision_hook import DecisionHook
from gpu_tenancy.errors import BadRequest, Conflict, NotFound

bp = Blueprint("blazar", __name__, url_prefix="/reservation/v1")
errors.register(bp)

NOT_ENOUGH = "Not enough hosts available"


def body() -> dict:
    """The request's JSON object, read as the native API reads one (parse_json: nesting
    refused before anything walks it, no NaN), and with no NUL or lone surrogate in any text."""
    try:
        parsed = parse_json()
    except BadRequest as exc:
        if exc.code != codes.MALFORMED_JSON:   # too deep, or NaN: its own words
            raise
        parsed = None
    if not isinstance(parsed, dict):
        raise BadRequest("Malformed parameter body: a JSON object is expected", codes.MALFORMED_JSON)
    refuse_nul(parsed, "the request body")
    return parsed


def load(session: Session, lease_id: str) -> m.Lease:
    """A lease the caller may see, as Blazar finds one: a cancelled (deleted) lease is gone."""
    try:
        row = native.load(session, lease_id)
    except NotFound:
        row = None
    if row is None or not view.visible(row):
        raise NotFound(f"Object with {{'lease_id': '{lease_id[:36]}'}} not found", codes.LEASE_NOT_FOUND)
    return row


@bp.get("/leases")
def index() -> ResponseReturnValue:
    rt.authorize("lease:list")
    everyone = rt.allowed("lease:list:all_projects")   # Blazar lists every project's leases to an admin
    with rt.read_transaction() as session:   # no pages: without SQLite's write lock
        return {"leases": view.listing(session, None if everyone else rt.context().project_id)}


@bp.get("/leases/<lease_id>")
def show(lease_id: str) -> ResponseReturnValue:
    with rt.transaction() as session:
        return {"lease": view.render_one(session, load(session, lease_id))}


@bp.post("/leases")
def create() -> ResponseReturnValue:
    rt.authorize("lease:create")
    cfg, caller = rt.runtime().config, rt.caller()
    given = body()
    with rt.transaction() as session:
        asked = asks.create_ask(session, given, rt.now())
    refuse = cfg.blazar_when_queued == "refuse"
    if refuse:   # no lease is made when the plan already says it would wait
        with rt.read_transaction() as session:   # a plan of the whole queue: without SQLite's write lock
            planned = dry_run(session, rt.now(), caller, asked.ask)
        if planned.placement is None or planned.placement.start > start_of(asked, rt.now()):
            raise Conflict(not_enough(asked.ask), codes.NOT_ENOUGH_CAPACITY)
    network = new_lease.check_with_cloud(rt.runtime().cloud_driver, caller, asked.ask, bool(cfg.readiness_url))
    made = new_lease.make_and_plan(
        rt.transaction, rt.now, cfg, rt.planner_settings(), rt.limits(), caller, asked.ask, network,
        DecisionHook.from_config(cfg), render_native,
        lambda session, row, rendered: rt.audit(session, "lease.create", row.id, row.project_id, None, rendered),
        rt.runtime().fits)
    if refuse and made.rendered["status"] in (LeaseState.REQUESTED.value, LeaseState.QUEUED.value):
        # another request took the GPUs between the preview and the plan: undo, as Blazar refuses
        native.end_lease(made.row.id, undo=True)
        raise Conflict(not_enough(asked.ask), codes.NOT_ENOUGH_CAPACITY)
    rt.runtime().wake_engine(can_wait=made.fitted)
    with rt.transaction() as session:
        return {"lease": view.render_one(session, session.get_one(m.Lease, made.row.id))}, 201


def dry_run(session: Session, now: int, caller: Caller, ask: LeaseAsk) -> PlannedLease:
    """Where the plan would put the lease now (nothing made)."""
    request, _ = leases.build_request(session, now, rt.limits(), caller, ask, "dry-run")
    return ledger.dry_run(session, now, rt.planner_settings(), request)


def start_of(asked: asks.Asked, now: int) -> int:
    """The asked start as the lease takes it: a start in the minute under way (Blazar's own
    check lets it through) is now, not the minute's first second, which no plan starts at."""
    return now if asked.start is None else max(asked.start, now)


def not_enough(ask: LeaseAsk) -> str:
    return (f"{NOT_ENOUGH}: {ask.instances} x {ask.shape} cannot start at the asked start date (the GPUs are "
            "taken or over the project's quota then); ask for a later window, or ask the native API "
            "(/v1/leases), which queues it")


@bp.put("/leases/<lease_id>")
def update(lease_id: str) -> ResponseReturnValue:
    given = body()
    with rt.transaction() as session:
        row = load(session, lease_id)
        rt.authorize("lease:update", row.project_id)
        start, end = view.window(row)
        changes = asks.update(given, row, start, end, rt.now(), LeaseState(row.status) in FINAL)
    # a new end and the name in one transaction: a taken name, or an end refused, refuses the whole update
    if changes.end is not None:
        _, placed = native.change_end(lease_id, changes.end, changes.name)
        rt.runtime().wake_engine(can_wait=placed)
    elif changes.end_now:   # an end that has come: the lease ends (a waiting one is cancelled), as on DELETE
        rt.runtime().wake_engine(can_wait=native.end_lease(lease_id, name=changes.name))
    elif changes.name is not None:
        native.rename(lease_id, changes.name)
    with rt.transaction() as session:
        # the lease this update ended: one not started yet was cancelled, which load() hides (a
        # deleted lease), but the answer shows the update made (TERMINATED), not a 404
        row = native.load(session, lease_id) if changes.end_now else load(session, lease_id)
        return {"lease": view.render_one(session, row)}


@bp.delete("/leases/<lease_id>")
def delete(lease_id: str) -> ResponseReturnValue:
    with rt.transaction() as session:
        row = load(session, lease_id)
        rt.authorize("lease:delete", row.project_id)
        over = LeaseState(row.status) in FINAL or row.status == LeaseState.ENDING.value
    if not over:   # Blazar deletes a terminated (or terminating) lease too: nothing left to end here
        rt.runtime().wake_engine(can_wait=native.end_lease(lease_id))
    return "", 204

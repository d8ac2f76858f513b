"""Counter-offers carried out: computed on the planner's inputs as the dry run reads them
(domain/offers.py), signed so that a tenant cannot make or change one, and taken
(`"accept_offer": <id>` on POST /v1/leases) under the ledger lock: the lease is made and
planned in one transaction, and if the plan no longer gives the offer's start, the
transaction is rolled back (409) and nothing is made.

An offer is an HMAC-signed token, not a row: the dry run writes nothing, and an offer
nobody takes costs nothing. It names the project it was made for, its expiry, what it
changes (shape, VMs, duration, start) and, when it was made for a lease already waiting,
that lease, which taking the offer cancels."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass, replace
from typing import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, to_epoch
from gpu_tenancy.domain import offers as domain
from gpu_tenancy.domain.lease_ask import LeaseAsk
from gpu_tenancy.domain.model import LeaseRequest, PlannedLease
from gpu_tenancy.domain.plan_insert import PlanBook
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import catalog, early_ends, ledger, networking, new_lease, notifications, plan_insert
from gpu_tenancy.engine.decision_hook import DecisionHook, decide
from gpu_tenancy.engine.events import record_transition
from gpu_tenancy.engine.leases import Caller, build_request, create, create_lock, volume_lock
from gpu_tenancy.engine.limits import Limits
from gpu_tenancy.engine.new_lease import Made, Transaction
from gpu_tenancy.errors import BadRequest, Conflict
from gpu_tenancy.timeutil import rfc3339

log = logging.getLogger(__name__)
S = LeaseState
VERSION = "o1"


@dataclass(frozen=True)
class OfferSettings:
    rules: domain.OfferRules
    valid_seconds: int
    key: bytes

    @classmethod
    def from_config(cls, config: Config) -> "OfferSettings":
        if config.offer_secret:
            key = config.offer_secret.encode()
        elif config.dashboard_token_keys:   # a secret every process of the service shares already
            key = hashlib.sha256(b"gpu-tenancy offers\0" + str(config.dashboard_token_keys[0]).encode()).digest()
        else:   # one process (the demo, the tests): an offer is taken from the process that made it
            key = secrets.token_bytes(32)
        return cls(domain.OfferRules(gpu_memory_gb=dict(config.gpu_memory_gb or {})), config.offer_valid_seconds,
                   key)


@dataclass(frozen=True)
class Signed:
    """An offer as it is shown: its id (the signed token), expiry and words."""
    offer: domain.Offer
    id: str
    expires: int
    words: str


@dataclass(frozen=True)
class Opened:
    """An offer's token, checked: the offer, and the waiting lease it replaces (None: none)."""
    offer: domain.Offer
    replaces: str | None


@dataclass(frozen=True)
class Preview:
    request: LeaseRequest
    columns: dict
    planned: PlannedLease
    offers: list[Signed]


def preview(session: Session, now: int, settings: PlannerSettings, limits: Limits, offer_settings: OfferSettings,
            caller: Caller, ask: LeaseAsk) -> Preview:
    """The dry run, and the offers when the lease would wait, from the same inputs; with
    accept_offer, the dry run of the lease that offer makes."""
    taking = ask.accept_offer is not None
    if ask.accept_offer is not None:
        ask = applied(ask, open_offer(offer_settings, ask.accept_offer, caller.project_id, now).offer, now)
    request, columns = build_request(session, now, limits, caller, ask, "dry-run")
    inputs = ledger.load_inputs(session, now, settings)
    if request.preemptible or taking:   # nothing to offer: the plain dry run
        return Preview(request, columns, ledger.dry_run_on(inputs, now, settings, request), [])
    planned, found = alternatives(session, now, settings, offer_settings, inputs, request, columns["shape"],
                                  caller.project_id, None)
    return Preview(request, columns, planned, found)


def make(transaction: Transaction, clock: Callable[[], int], config: Config, settings: PlannerSettings,
         limits: Limits, offer_settings: OfferSettings, caller: Caller, ask: LeaseAsk, network: networking.Choice,
         hook: DecisionHook, render: Callable[[m.Lease], dict],
         audit: Callable[[Session, m.Lease, dict], m.AuditRecord],
         fits: plan_insert.InsertCache | None = None, replacing: Replacing | None = None) -> tuple[Made, list[Signed]]:
    """A create: the lease made and planned (new_lease.make_and_plan) with the offers when it
    waits, or the lease an offer makes (take: ask.accept_offer), offered nothing again."""
    if ask.accept_offer is not None:
        return take(transaction, clock, config, settings, limits, offer_settings, caller, ask, network, hook,
                    render, audit, replacing), []
    fitted: list[list[Signed]] = []

    def before_fit(session: Session, book: PlanBook, row: m.Lease) -> None:
        fitted[:] = [on_plan(session, clock(), offer_settings, book, row)]
    made = new_lease.make_and_plan(transaction, clock, config, settings, limits, caller, ask, network, hook,
                                   render, audit, fits, before_fit)
    if made.fitted:   # from the plan it was fitted into: no second plan
        return made, fitted[0] if fitted and made.row.status == S.QUEUED.value else []
    return made, for_waiting(transaction, clock(), settings, offer_settings, made.row)


def on_plan(session: Session, now: int, offer_settings: OfferSettings, book: PlanBook, row: m.Lease) -> list[Signed]:
    """The offers for a lease being fitted into the plan (`book`, without it yet), each
    replacing it when taken: each alternative tried after every lease of that plan
    (domain.offers_after). A courtesy of the answer: if they cannot be computed, none."""
    try:
        request = ledger.newest(replace(ledger.request_from_row(row), created_at=now))
        own = book.trial(now, request).placement
        if own is not None and own.start <= max(now, request.earliest_start):
            return []   # starts as asked: nothing to offer (and the full replan plans it)
        shapes = shape_options(session)
        shape = next((s for s in shapes if s.name == row.shape), None)
        if shape is None:
            return []
        expires = now + offer_settings.valid_seconds
        return [Signed(o, sign(offer_settings.key, row.project_id, o, expires, row.id), expires, o.words(now, request))
                for o in domain.offers_after(now, lambda lr: book.trial(now, lr), request, shape, shapes,
                                             offer_settings.rules)]
    except Exception:
        log.exception("the offers for lease %s could not be computed", row.id)
        return []


def shape_options(session: Session) -> list[domain.ShapeOption]:
    """The shapes a lease may ask for (not retired), by name."""
    return [domain.ShapeOption(s.name, s.gpu_model, s.gpus) for s in catalog.offered_shapes(session)]


def for_waiting(transaction: Transaction, now: int, settings: PlannerSettings, offer_settings: OfferSettings,
                row: m.Lease) -> list[Signed]:
    """The offers for a lease just made that waits, each replacing it when taken. A courtesy
    of the answer: if they cannot be computed, the answer goes without them."""
    if row.status != S.QUEUED.value:   # written with its place (a fitted create): no query
        return []
    try:
        with transaction() as session:
            # as the replan left it: `row` is the lease as it was made (queued), and a lease the
            # replan started now would be offered a copy of itself planned after its own hold
            if session.scalar(select(m.Lease.status).where(m.Lease.id == row.id)) != S.QUEUED.value:
                return []
            inputs = ledger.load_inputs(session, now, settings)
            inputs.waiting = [w for w in inputs.waiting if w.lease_id != row.id]   # instead of it
            request = replace(ledger.request_from_row(row), created_at=now)
            return alternatives(session, now, settings, offer_settings, inputs, request, row.shape,
                                row.project_id, row.id)[1]
    except Exception:
        log.exception("the offers for lease %s could not be computed", row.id)
        return []


def alternatives(session: Session, now: int, settings: PlannerSettings, offer_settings: OfferSettings,
                 inputs: ledger.PlannerInputs, request: LeaseRequest, shape_name: str, project_id: str,
                 replaces: str | None) -> tuple[PlannedLease, list[Signed]]:
    """The dry run of `request` (asked now, after every lease), and its offers, signed, from one plan."""
    shapes = shape_options(session)
    shape = next((s for s in shapes if s.name == shape_name), None)
    asked = ledger.newest(request)
    if shape is None:   # retired meanwhile: nothing of its own to offer
        return ledger.dry_run_on(inputs, now, settings, request), []
    offered = domain.offers(now, inputs.hosts, inputs.holds, inputs.quotas, inputs.waiting, inputs.usage,
                            ledger.settings_for(inputs, settings), asked, shape, shapes, offer_settings.rules)
    expires = now + offer_settings.valid_seconds
    return offered.plan.leases[request.lease_id], [
        Signed(o, sign(offer_settings.key, project_id, o, expires, replaces), expires, o.words(now, asked))
        for o in offered.offers]


def applied(ask: LeaseAsk, offer: domain.Offer, now: int) -> LeaseAsk:
    """The ask with what the offer changes; a reserved start replaces the ask's start and
    latest start (the GPUs are held for it from then). One passed by the time the offer is
    taken (a `borrow` offer's is the moment it was made; offers may be valid for a day) is now:
    the tenant gave no start in the past, and check_holds wants the lease started by then."""
    if offer.reserve:
        return replace(ask, shape=offer.shape, instances=offer.instances, duration=offer.duration,
                       start=max(offer.start, now), latest_start=None, accept_offer=None)
    return replace(ask, shape=offer.shape, instances=offer.instances, duration=offer.duration, accept_offer=None)


def take(transaction: Transaction, clock: Callable[[], int], config: Config, settings: PlannerSettings,
         limits: Limits, offer_settings: OfferSettings, caller: Caller, ask: LeaseAsk, network: networking.Choice,
         hook: DecisionHook, render: Callable[[m.Lease], dict],
         audit: Callable[[Session, m.Lease, dict], m.AuditRecord], replacing: Replacing | None = None) -> Made:
    """Make the lease an offer describes (ask.accept_offer), planned, in one transaction under
    the ledger lock: if the plan no longer starts it by the offer's start (or would make it
    borrow where the offer did not), a 409 and nothing made. A lease the offer replaces is
    cancelled in the same transaction."""
    assert ask.accept_offer is not None
    asked_at = clock()
    opened = open_offer(offer_settings, ask.accept_offer, caller.project_id, asked_at)
    wanted = applied(ask, opened.offer, asked_at)
    lease_id = ledger.new_lease_id()

    def make(session: Session, asked: DecisionHook) -> tuple[m.Lease, dict]:
        # the create's lock (with the name's), the volume's, then the ledger's, as a create takes them
        # (leases.lock_for_change)
        create_lock(session, caller.project_id, wanted.name)
        if wanted.volume is not None and wanted.volume.id:
            volume_lock(session, caller.project_id, wanted.volume.id)
        ledger_lock(session)   # held until this transaction ends: the check and the plan under it
        now = clock()   # once the lock is held: the plan is made at the time it is made, not before a wait
        if opened.replaces is not None:
            cancel_replaced(session, now, caller, opened.replaces, lease_id, replacing)
        row = create(session, now, limits, caller, wanted, asked, lease_id)
        network.apply(row)
        session.flush()
        row = early_ends.plan_new(session, lambda: now, config, settings, row.id)
        check_holds(row, opened.offer, now)
        rendered = render(row)
        audit(session, row, rendered)
        return row, rendered
    row, rendered = decide(hook, transaction, make)
    return Made(row, rendered)


def check_holds(row: m.Lease, offer: domain.Offer, now: int) -> None:
    """The lease as planned starts by the offer's start ("now" is now), borrowing only if it said so."""
    start = to_epoch(row.start_at) if row.start_at is not None else None
    if (row.status in (S.SCHEDULED.value, S.QUEUED.value) and start is not None and start <= max(offer.start, now)
            and (offer.borrowing or not row.borrowing)):
        return
    when = "no start" if start is None else f"a start at {rfc3339(start)}"
    offered = "now" if offer.start <= now else f"at {rfc3339(offer.start)}"
    raise Conflict(f"the offer no longer holds: it started {offered}, and the plan now gives {when}"
                   f"{' beyond the quota' if row.borrowing and not offer.borrowing else ''}; nothing was made. "
                   "Ask again (POST /v1/leases?dry_run=true) for the offers of now", codes.OFFER_GONE)


# Called with the lease an offer replaces, before it is cancelled (it may refuse: the caller's
# right to cancel it); returns what to call once it is (its audit record)
Replacing = Callable[[Session, m.Lease], Callable[[], object]]


def cancel_replaced(session: Session, now: int, caller: Caller, lease_id: str, by: str,
                    replacing: Replacing | None = None) -> None:
    row = session.get(m.Lease, lease_id)
    if row is None or row.project_id != caller.project_id:   # the signature binds both: not reached
        raise BadRequest("the offer replaces a lease of another project", codes.BAD_OFFER)
    if row.status not in (S.REQUESTED.value, S.QUEUED.value):
        raise Conflict(f"the offer was made instead of lease {lease_id}, which is {row.status} now; nothing was "
                       "made. Cancel that lease first and ask again if you still want another",
                       codes.OFFER_GONE)
    cancelled = replacing(session, row) if replacing is not None else None
    record_transition(session, row, S.CANCELLED, now, caller.user_id, f"replaced by lease {by}: an offer taken")
    ledger.clear_queue_info(row)
    notifications.enqueue(session, row, notifications.DELETE, now)   # as a cancel tells it (leases.cancel)
    if cancelled is not None:
        cancelled()


# --------------------------------------------------------------------------
# the token: "o1.<payload>.<mac>", both base64url; the MAC is HMAC-SHA256 over "o1.<payload>"

def sign(key: bytes, project_id: str, offer: domain.Offer, expires: int, replaces: str | None) -> str:
    fields = [project_id, offer.kind.value, offer.shape, offer.gpu_model, offer.gpus_per_vm, offer.instances,
              offer.duration, offer.start, offer.reserve, offer.borrowing, expires, replaces]
    payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{VERSION}.{payload}.{_mac(key, payload)}"


def open_offer(offer_settings: OfferSettings, token: str, project_id: str, now: int) -> Opened:
    """The offer of a token this service signed for `project_id`: a 400 if it is not one,
    a 409 if it has expired."""
    bad = BadRequest("accept_offer is not an offer this service made for your project (or it was changed); "
                     "ask with ?dry_run=true for the offers of now", codes.BAD_OFFER)
    parts = token.split(".")
    # compare_digest takes only ASCII text; a token of ours is ASCII (base64url) throughout
    if (not token.isascii() or len(parts) != 3 or parts[0] != VERSION
            or not hmac.compare_digest(parts[2], _mac(offer_settings.key, parts[1]))):
        raise bad
    try:
        (project, kind, shape, model, gpus, instances, duration, start, reserve, borrowing, expires,
         replaces) = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        offer = domain.Offer(domain.Kind(kind), shape, model, int(gpus), int(instances), int(duration), int(start),
                             bool(reserve), bool(borrowing))
    except (ValueError, TypeError, binascii.Error):   # signed by this key, so made here: not reached
        raise bad from None
    if project != project_id:
        raise bad
    if now > int(expires):
        raise Conflict(f"the offer expired at {rfc3339(int(expires))} (offers hold {offer_settings.valid_seconds} s); "
                       "ask with ?dry_run=true for the offers of now", codes.OFFER_EXPIRED)
    return Opened(offer, replaces)


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, f"{VERSION}.{payload}".encode(), hashlib.sha256).digest()[:20])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")

"""What handlers reach through the app: the database, the clock, policy, the engine, and
the planner settings and limits read once from the app's configuration."""
from __future__ import annotations

import contextlib
import ipaddress
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Iterator
from urllib.parse import urlencode

from flask import current_app, g, request, url_for
from oslo_context.context import RequestContext
from oslo_policy.policy import Enforcer, PolicyNotAuthorized
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy import error_codes as codes
from gpu_tenancy.api import event_markers
from gpu_tenancy.config import Config
from gpu_tenancy.db.models import AuditRecord
from gpu_tenancy.db.session import read_scope, session_scope
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.engine import audit as audit_log
from gpu_tenancy.engine.capacity import PlannedCache
from gpu_tenancy.engine.plan_insert import InsertCache
from gpu_tenancy.engine import planner_settings as planner_settings_
from gpu_tenancy.engine.leases import Caller
from gpu_tenancy.engine.limits import Limits
from gpu_tenancy.engine.offers import OfferSettings
from gpu_tenancy.engine.service_secrets import shared_secret
from gpu_tenancy.errors import Conflict, Forbidden

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    config: Config
    sessions: sessionmaker[Session]
    clock: Any
    enforcer: Enforcer
    engine: Any = None            # EngineRunner when this process runs the engine
    cloud: Any = None
    extras: dict = field(default_factory=dict)
    make_cloud: Any = None        # builds the driver in an API-only process, on first use
    # read from `config` once; each app its own (two apps in one process do not share them)
    planner_settings: PlannerSettings = field(init=False)
    limits: Limits = field(init=False)
    planned: PlannedCache = field(init=False)    # the calendar's planned GPUs, made once per replan
    fits: InsertCache = field(init=False)        # the plan new leases are fitted into (engine/plan_insert.py)
    _offers: OfferSettings | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.planner_settings = planner_settings_.from_config(self.config)
        self.limits = Limits.from_config(self.config)
        self.planned = PlannedCache(max_age=self.config.engine_tick_seconds)
        self.fits = InsertCache(min_waiting=self.config.plan_insert_min_waiting)

    @property
    def offers(self) -> OfferSettings:
        """Read once, on first use. With no key configured, the key every process shares
        through the database: an offer one worker made is taken by another."""
        if self._offers is None:
            offers = OfferSettings.from_config(self.config)
            if not (self.config.offer_secret or self.config.dashboard_token_keys):
                offers = replace(offers, key=shared_secret(self.sessions, "offers", b"gpu-tenancy offers"))
            self._offers = offers
        return self._offers

    @property
    def event_marker_key(self) -> bytes:
        """The key that seals a lease's events' markers (api/event_markers.py): the offers' own,
        shared by every process alike, derived for this use."""
        return event_markers.marker_key(self.offers.key)

    def wake_engine(self, can_wait: bool = False) -> None:
        """`can_wait`: a create fitted into the plan, a cancel taken out of it, a new duration placed
        in it (engine/runner.py: wake)."""
        if self.engine is not None:
            self.engine.wake(can_wait)

    def cloud_driver(self) -> Any:
        """The engine's driver, or (API-only worker) one of this process's own, made once."""
        if self.cloud is None and self.make_cloud is not None:
            self.cloud = self.make_cloud()
        return self.cloud


def runtime() -> Runtime:
    return current_app.extensions["gpu_tenancy"]


def now() -> int:
    return runtime().clock.now()


def planner_settings() -> PlannerSettings:
    return runtime().planner_settings


def limits() -> Limits:
    return runtime().limits


@contextlib.contextmanager
def transaction() -> Iterator[Session]:
    """A request's transaction. A unique key that another request wrote between this one's
    check and its write (the checks refuse what was there before: one shape added twice at the
    same moment, two first webhooks of a project) is a 409 to ask again, not a 500; the
    transaction is rolled back, so nothing of this request is kept."""
    try:
        with session_scope(runtime().sessions) as session:
            yield session
    except IntegrityError as exc:
        if not unique_violation(exc):
            raise
        log.warning("a unique key written meanwhile by another request: %s", exc.orig)
        raise Conflict("another request wrote the same thing at the same moment; nothing of this one was kept: "
                       "look at what is there now and ask again if still needed", codes.CONFLICT) from None


@contextlib.contextmanager
def read_transaction() -> Iterator[Session]:
    """A request's transaction that only reads (db/session.py: read_scope): on SQLite it holds
    no write lock, so a costly read (a plan, a long listing) keeps no other request or the
    engine from writing meanwhile. Nothing written in it is kept."""
    with read_scope(runtime().sessions) as session:
        yield session


def unique_violation(exc: IntegrityError) -> bool:
    """PostgreSQL's unique_violation (SQLSTATE 23505), or SQLite's unique or primary key constraint."""
    return getattr(exc.orig, "sqlstate", None) == "23505" or "UNIQUE constraint failed" in str(exc.orig)


def context() -> RequestContext:
    return g.context


def caller() -> Caller:
    ctx = context()
    assert ctx.user_id is not None and ctx.project_id is not None   # project-scoped (app.py refuses others)
    return Caller(user_id=ctx.user_id, project_id=ctx.project_id, is_admin=is_admin())


def is_admin() -> bool:
    """Asked of the policy once per request (a create asks it twice: its caller, its rendering)."""
    if "is_admin" not in g:
        g.is_admin = allowed("admin")
    return g.is_admin


def allowed(action: str, project_id: str | None = None) -> bool:
    ctx = context()
    target = {"project_id": project_id or ctx.project_id}
    return runtime().enforcer.enforce(action, target, ctx.to_policy_values())


def authorize(action: str, project_id: str | None = None, *, target: dict | None = None,
              credentials: dict | None = None) -> None:
    """Refuse with 403 unless the policy allows the action on the project; `target` and
    `credentials` add to what the rule sees (the token's roles and project)."""
    try:
        runtime().enforcer.authorize(action, {"project_id": project_id or context().project_id, **(target or {})},
                                     {**context().to_policy_values(), **(credentials or {})}, do_raise=True)
    except PolicyNotAuthorized:
        raise Forbidden(f"policy does not allow {action} for this token", "gpu_tenancy.policy") from None


def audit(session: Session, action: str, target_id: str, target_project_id: str | None,
          before: dict | None, after: dict | None) -> AuditRecord:
    """Record the change in the session that makes it (see engine/audit.py)."""
    ctx = context()
    who = audit_log.Who(ctx.user_id, ctx.project_id, g.get("request_id"), remote_address())
    return audit_log.record(session, now(), who, action, target_id, target_project_id, before, after)


def remote_address() -> str | None:
    """The client's address: the peer's, or what the trusted proxies said
    (ProxyFix, config trusted_proxies); if that is not an address, the peer's."""
    peer = request.environ.get("werkzeug.proxy_fix.orig", {}).get("REMOTE_ADDR")
    for candidate in (request.remote_addr, peer):
        try:
            return str(ipaddress.ip_address(candidate or ""))
        except ValueError:
            continue
    return None


def next_href(endpoint: str, marker: str, **path: str) -> str:
    """The link to a listing's next page: this request's query, every value of a repeated
    key kept, with the new marker; `path`: the route's own values (a lease's id). Not
    url_for(**args): it takes some keys as its own arguments (endpoint, _external, _method,
    _anchor) and keeps one value of each key."""
    query = [(k, v) for k, v in request.args.items(multi=True) if k != "marker"] + [("marker", marker)]
    return f"{url_for(endpoint, _external=True, **path)}?{urlencode(query)}"

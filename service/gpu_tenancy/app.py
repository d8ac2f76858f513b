"""create_app(): configuration, database, policy, cloud, engine, and the WSGI stack."""
from __future__ import annotations

import logging
import uuid

from flask import Flask, g, request
from oslo_context.context import RequestContext
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import RequestRedirect

from gpu_tenancy import __version__
from gpu_tenancy.api import auth, errors
from gpu_tenancy.api.policy import make_enforcer
from gpu_tenancy.api.runtime import Runtime
from gpu_tenancy.api.validation import check_path_values, refuse_nul_in_query
from gpu_tenancy.clock import SystemClock
from gpu_tenancy.cloud.registry import make_cloud
from gpu_tenancy.config import Config
from gpu_tenancy.db.session import make_engine, make_sessionmaker
from gpu_tenancy.errors import Unauthorized

log = logging.getLogger(__name__)

# readiness.report, lease_agent.*: the guest has no token; it shows the lease's secret instead
# (api/readiness.py, api/lease_agent.py: done also takes a token, and checks which it got)
PUBLIC_ENDPOINTS = {"root", "healthz", "openapi.document", "readiness.report", "lease_agent.done",
                    "lease_agent.utilization"}
MAX_BODY = 1024 * 1024


def create_app(config: Config | None = None, *, clock=None, cloud=None, start_engine: bool | None = None) -> Flask:
    config = config or Config.load()
    clock = clock or SystemClock()
    sessions = make_sessionmaker(make_engine(config.database_url), bool(config.notifications_transport_url))
    app = Flask("gpu_tenancy")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.sort_keys = False  # type: ignore[attr-defined]  # Flask's DefaultJSONProvider has it
    runtime = Runtime(config=config, sessions=sessions, clock=clock, enforcer=make_enforcer(config.policy_file))
    app.extensions["gpu_tenancy"] = runtime

    if config.run_engine:
        from gpu_tenancy.engine.lifecycle import Lifecycle
        from gpu_tenancy.engine.runner import EngineRunner
        runtime.cloud = cloud or make_cloud(config, clock)
        runtime.engine = EngineRunner(Lifecycle(sessions, runtime.cloud, clock, config, runtime.planner_settings))
        if start_engine if start_engine is not None else True:
            runtime.engine.start()
    else:   # an API worker: the few reads of the cloud it makes (GET /v1/volumes) get a driver when first asked
        runtime.cloud = cloud
        runtime.make_cloud = lambda: make_cloud(config, clock)

    errors.register(app)
    register_blueprints(app)

    @app.before_request
    def _identify():
        g.request_id = "req-" + str(uuid.uuid4())
        g.context = RequestContext.from_environ(request.environ, request_id=g.request_id)
        refuse_nul_in_query()
        if request.blueprint != "dashboard":   # its pages hand their ids to the API, which checks them
            check_path_values()
        if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint == "metrics.show":  # it checks its own
            return None
        if isinstance(request.routing_exception, RequestRedirect):  # /dashboard -> /dashboard/: tells nothing
            return None
        if request.blueprint == "dashboard":  # its own login (dashboard/login.py); it calls the API in-process
            return None
        if request.environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed" or not g.context.project_id:
            raise Unauthorized("a valid project-scoped token is required (X-Auth-Token)",
                               "gpu_tenancy.unauthenticated")
        return None

    @app.after_request
    def _request_id(response):
        response.headers["X-OpenStack-Request-Id"] = g.get("request_id", "")
        return response

    # The WSGI stack, outermost first: auth (keystonemiddleware or noauth2)
    # sets the identity headers, then Flask routes; Flask itself refuses
    # unconfirmed identities so that every 401 is in the API's error form.
    if config.auth_strategy == "noauth2":
        log.warning("auth_strategy noauth2: identity headers are trusted as given; demo and tests only")
        app.wsgi_app = auth.NoAuth2(app.wsgi_app)  # type: ignore[method-assign]  # Flask's way to add middleware
    else:
        app.wsgi_app = auth.keystone(app.wsgi_app, config.keystone_authtoken)  # type: ignore[method-assign]
    if config.trusted_proxies:  # else X-Forwarded-* are anyone's words: the peer's address is the client's
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=config.trusted_proxies, x_proto=config.trusted_proxies)
    return app


def register_blueprints(app: Flask) -> None:
    from gpu_tenancy.api import (audit, budgets, capacity, hosts, images, lease_agent, leases, metrics, openapi,
                                 priority_classes, queue, quotas, readiness, share, shapes, usage, volumes,
                                 webhooks, whatif)
    for module in (leases, readiness, lease_agent, shapes, images, quotas, priority_classes, budgets, capacity,
                   usage, hosts, audit, openapi, metrics, webhooks, volumes, queue, share, whatif):
        app.register_blueprint(module.bp)
    from gpu_tenancy.api.blazar import bp as blazar
    app.register_blueprint(blazar)
    from gpu_tenancy.dashboard import bp as dashboard
    app.register_blueprint(dashboard)

    @app.get("/", endpoint="root")
    def root():
        return {"versions": [{"id": "v1.0", "status": "CURRENT", "version": __version__,
                              "links": [{"rel": "self", "href": request.host_url + "v1"}]}]}

    @app.get("/healthz", endpoint="healthz")
    def healthz():
        return {"status": "ok"}

"""/metrics: Prometheus exposition. It names every project and its GPU use, so
by default only the metrics:show rule opens it: an admin's token, or the
scrape token of the config sent as "Authorization: Bearer <token>".
`metrics_public: true` opens it to anyone."""
from __future__ import annotations

import hmac

from flask import Blueprint, Response, request
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.engine.metrics import registry_for
from gpu_tenancy.errors import Unauthorized

bp = Blueprint("metrics", __name__)


def scrape_token_sent(expected: str | None) -> bool:
    """The bearer token is the configured one (compared in constant time)."""
    if not expected:
        return False
    kind, _, sent = request.headers.get("Authorization", "").partition(" ")
    return kind.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), expected.encode())


@bp.get("/metrics")
def show() -> ResponseReturnValue:
    runtime = rt.runtime()
    if not runtime.config.metrics_public:
        if scrape_token_sent(runtime.config.metrics_scrape_token):
            rt.authorize("metrics:show", None, credentials={"metrics_scrape_token": "valid"})
        elif rt.context().project_id and request.environ.get("HTTP_X_IDENTITY_STATUS") == "Confirmed":
            rt.authorize("metrics:show", None)
        else:
            raise Unauthorized("/metrics needs an admin's token or the scrape token (Authorization: Bearer)",
                               "gpu_tenancy.unauthenticated")
    registry = runtime.extras.get("metrics")
    if registry is None:
        registry = runtime.extras["metrics"] = registry_for(runtime.sessions, runtime.clock,
                                                             runtime.planner_settings.release_floor,
                                                             runtime.config.idle_minutes)
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)

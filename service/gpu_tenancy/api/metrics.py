"""/metrics: Prometheus exposition. Open to scrapers without a token unless
`metrics_public` is off; then only an admin may read it (it names projects)."""
from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.engine.metrics import registry_for

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def show():
    runtime = rt.runtime()
    if not runtime.config.metrics_public:
        rt.authorize("metrics:show", None)
    registry = runtime.extras.get("metrics")
    if registry is None:
        registry = runtime.extras["metrics"] = registry_for(runtime.sessions, runtime.clock)
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)

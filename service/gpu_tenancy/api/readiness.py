"""POST /v1/leases/{id}/readiness: a lease's VM reports whether its GPUs are usable.

The guest has no Keystone token: it proves itself with the lease's secret, which
the service put in its user data (X-Lease-Token). Policy compares the digests of
the presented and the lease's secret, so operators can widen the rule (to let an
admin report by hand, say) without touching the code."""
from __future__ import annotations

from flask import Blueprint, request
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.leases import load_any, refuse_secret
from gpu_tenancy.api.validation import PRINTABLE, json_body
from gpu_tenancy.engine import readiness
from gpu_tenancy.errors import Forbidden, Unauthorized

bp = Blueprint("readiness", __name__, url_prefix="/v1/leases")

TOKEN_HEADER = "X-Lease-Token"
COUNT = {"type": "integer", "minimum": 0, "maximum": 1024}
REPORT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["instance", "ok"],
    "properties": {
        "instance": {"type": "integer", "minimum": 0, "maximum": 999, "description": "which VM of the lease"},
        "ok": {"type": "boolean", "description": "the expected GPUs are visible and each one usable"},
        "gpus_visible": COUNT,
        "gpus_usable": COUNT,
        # told in the lease's events, which its project, admins and the exports read
        "detail": {"type": "string", "maxLength": 4096, "pattern": PRINTABLE,
                   "description": "the probe's own words: printable text, no control character"},
    },
}


@bp.post("/<lease_id>/readiness")
def report(lease_id: str) -> ResponseReturnValue:
    token = request.headers.get(TOKEN_HEADER, "")
    if not token:
        raise Unauthorized(f"the lease's secret is required ({TOKEN_HEADER})", "gpu_tenancy.no_lease_token")
    with rt.transaction() as session:
        row = load_any(session, lease_id)
        try:
            rt.authorize("lease:readiness:report", row.project_id,
                         target={"lease_token_sha256": readiness.token_digest(row.readiness_token or "")},
                         credentials={"lease_token_sha256": readiness.token_digest(token)})
        except Forbidden as refusal:
            refuse_secret(row, lease_id, refusal)
        body = json_body(REPORT)
        readiness.record(session, rt.now(), row, readiness.Report(
            body["instance"], body["ok"], body.get("detail", ""), body.get("gpus_visible"),
            body.get("gpus_usable")))
        return {"readiness": readiness.summary(row)}

"""What a running lease's VMs tell the service, with the lease's secret (X-Lease-Token,
as the readiness probe does), beside the tenant's own calls:

- POST /v1/leases/{id}/done: the work is done; the lease ends now and gives its GPUs
  back (`gpu-done` in the VM; a member of the project may call it with a token too).
- POST /v1/leases/{id}/utilization: the guest agent's report of each GPU's utilisation
  and memory used, every minute (engine/gpu_activity.py)."""
from __future__ import annotations

from flask import Blueprint, request

from gpu_tenancy import error_codes as codes
from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.lease_view import render
from gpu_tenancy.api.leases import confirmed_identity, load, load_any, refuse_secret
from gpu_tenancy.api.readiness import TOKEN_HEADER
from gpu_tenancy.api.validation import PRINTABLE, json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.gpu_activity import REPORT_INTERVAL, GpuSample
from gpu_tenancy.engine import gpu_activity, leases, readiness
from gpu_tenancy.engine.decision_hook import DecisionHook, decide
from gpu_tenancy.errors import BadRequest, Forbidden, PayloadTooLarge, Unauthorized
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("lease_agent", __name__, url_prefix="/v1/leases")

INSTANCE = {"type": "integer", "minimum": 0, "maximum": 999, "description": "which VM of the lease"}
DONE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "instance": INSTANCE,
        "detail": {"type": "string", "maxLength": 1024, "pattern": PRINTABLE,
                   "description": "in the lease's events: the job's exit status, say; printable text, no control "
                                  "character"},
    },
}
MAX_GPUS = 16
UTILIZATION = {
    "type": "object",
    "additionalProperties": False,
    "required": ["instance", "gpus"],
    "properties": {
        "instance": INSTANCE,
        "gpus": {"type": "array", "maxItems": MAX_GPUS, "description": "one entry per GPU of the VM",
                 "items": {"type": "object", "additionalProperties": False,
                           "required": ["index", "utilization", "memory_used_mib"], "properties": {
                               "index": {"type": "integer", "minimum": 0, "maximum": MAX_GPUS - 1},
                               "utilization": {"type": "integer", "minimum": 0, "maximum": 100,
                                               "description": "percent (nvidia-smi utilization.gpu)"},
                               "memory_used_mib": {"type": "integer", "minimum": 0, "maximum": 1048576}}}},
    },
}
MAX_REPORT_BYTES = 4096   # 16 GPUs take well under 1 KiB


def lease_secret() -> str:
    return request.headers.get(TOKEN_HEADER, "")


def authorize(row: m.Lease, lease_id: str, action: str, secret: str) -> None:
    """The lease's secret (compared as digests), or whatever else the rule allows a token."""
    try:
        rt.authorize(action, row.project_id,
                     target={"lease_token_sha256": readiness.token_digest(row.readiness_token or "")},
                     credentials={"lease_token_sha256": readiness.token_digest(secret)} if secret else None)
    except Forbidden as refusal:
        if not secret:
            raise
        refuse_secret(row, lease_id, refusal)


@bp.post("/<lease_id>/done")
def done(lease_id: str):
    secret = lease_secret()
    if not secret and not confirmed_identity():
        raise Unauthorized(f"the lease's secret ({TOKEN_HEADER}) or a project-scoped token (X-Auth-Token) "
                           "is required", codes.NO_LEASE_TOKEN)
    cfg = rt.runtime().config

    def end(session, hook):
        # with the secret: any lease (the secret tells which); with a token: one the caller may see
        row = load_any(session, lease_id) if secret else load(session, lease_id)
        if secret and not readiness.is_token_of(row, secret):
            # refused whatever identity comes with it: it would pass as the member's and be told as the VM's
            refuse_secret(row, lease_id, Forbidden(f"the secret given ({TOKEN_HEADER}) is not lease {row.id}'s",
                                                   "gpu_tenancy.policy"))
        authorize(row, lease_id, "lease:done", secret)
        # read once the sender is known (as the readiness and utilisation reports are): the route
        # takes requests without a token, and anyone could have had the service parse 1 MiB
        body = json_body(DONE) if request.get_data(cache=True) else {}
        actor = "guest" if secret else rt.context().user_id
        where = f"VM {body['instance']}" if "instance" in body else ("the VM" if secret else "the user")
        why = f"the work is done, said {where}" + (f": {body['detail']}" if body.get("detail") else "")
        leases.lock_for_change(session, row)
        before = render(row)
        leases.done(session, rt.now(), cfg, rt.planner_settings(), row, actor, why, hook)
        rt.audit(session, "lease.done", row.id, row.project_id, before, render(row))
        return {"id": row.id, "status": row.status, "end": rfc3339(to_epoch(row.end_at))}
    rendered = decide(DecisionHook.from_config(cfg), rt.transaction, end)
    rt.runtime().wake_engine()
    return {"lease": rendered}


@bp.post("/<lease_id>/utilization")
def utilization(lease_id: str):
    secret = lease_secret()
    if not secret:
        raise Unauthorized(f"the lease's secret is required ({TOKEN_HEADER})", codes.NO_LEASE_TOKEN)
    if (request.content_length or 0) > MAX_REPORT_BYTES:
        raise PayloadTooLarge(f"a utilisation report is at most {MAX_REPORT_BYTES} bytes",
                              codes.REQUEST_TOO_LARGE)
    with rt.transaction() as session:
        row = load_any(session, lease_id)
        authorize(row, lease_id, "lease:utilization:report", secret)
        body = json_body(UTILIZATION)
        if len({g["index"] for g in body["gpus"]}) != len(body["gpus"]):
            raise BadRequest("each GPU is reported once: two entries have the same index", codes.INVALID_INPUT)
        samples = [GpuSample(g["utilization"], g["memory_used_mib"])
                   for g in sorted(body["gpus"], key=lambda g: g["index"])]
        activity = gpu_activity.record(session, rt.now(), row, gpu_activity.Report(body["instance"], samples),
                                       rt.runtime().config.idle_utilization_percent)
        return {"utilization": gpu_activity.summary(activity, rt.now(), REPORT_INTERVAL)}

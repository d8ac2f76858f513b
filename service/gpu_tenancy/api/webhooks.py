"""/v1/webhooks/{project_id}: where a project's lease notices (the before-end
warning) are POSTed, signed with the project's secret (see engine/webhooks.py)."""
from __future__ import annotations

from sqlalchemy.orm import Session

from flask import Blueprint
from flask.typing import ResponseReturnValue
from sqlalchemy import select

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import check_identifier, json_body
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.engine import webhook_targets, webhooks
from gpu_tenancy.errors import BadRequest, NotFound
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("webhooks", __name__, url_prefix="/v1/webhooks")
RECENT = 20   # deliveries an admin sees with their errors

UPDATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["webhook"],
    "properties": {"webhook": {
        "type": "object",
        "additionalProperties": False,
        "required": ["url"],
        "properties": {
            "url": {"type": "string", "minLength": 8, "maxLength": 2048, "pattern": r"^https?://[^\s\x00-\x1f]+$",
                    "description": "http(s) URL the notices are POSTed to"},
            "secret": {"type": "string", "minLength": 16, "maxLength": 256, "pattern": r"^[\x21-\x7e]+$",
                       "description": "the HMAC-SHA256 key; omitted: the service makes one"},
        },
    }},
}


def render(row: m.ProjectWebhook, with_secret: bool = False) -> dict:
    out = {"project_id": row.project_id, "url": row.url, "events": list(webhooks.EVENTS),
           "signature": f"{webhooks.SIGNATURE_HEADER}: sha256=HMAC-SHA256(secret, "
                        f"{webhooks.TIMESTAMP_HEADER} + '.' + body)",
           "created_at": rfc3339(to_epoch(row.created_at)), "updated_at": rfc3339(to_epoch(row.updated_at)),
           "recent_deliveries": None}   # an admin's GET fills it in
    if with_secret:
        out["secret"] = row.secret
    return out


def load(session: Session, project_id: str) -> m.ProjectWebhook:
    row = session.get(m.ProjectWebhook, project_id)
    if row is None:
        raise NotFound(f"project {project_id} has no webhook", "gpu_tenancy.webhook_not_found")
    return row


@bp.get("/<project_id>")
def show(project_id: str) -> ResponseReturnValue:
    rt.authorize("webhook:show", check_identifier("project_id", project_id))
    with rt.transaction() as session:
        shown = render(load(session, project_id))
        if rt.is_admin():   # why deliveries failed: tenants see only that they did (engine/webhooks.py)
            shown["recent_deliveries"] = [
                {"id": d.id, "lease_id": d.lease_id, "event": d.event, "status": d.status, "attempts": d.attempts,
                 "last_error": d.last_error} for d in session.scalars(
                    select(m.WebhookDelivery).where(m.WebhookDelivery.project_id == project_id)
                    .order_by(m.WebhookDelivery.id.desc()).limit(RECENT))]
        return {"webhook": shown}


@bp.put("/<project_id>")
def update(project_id: str) -> ResponseReturnValue:
    rt.authorize("webhook:update", check_identifier("project_id", project_id))
    body = json_body(UPDATE)["webhook"]
    try:
        webhook_targets.check(body["url"], rt.runtime().config.webhook_allowed_networks)
    except webhook_targets.TargetRefused as exc:
        raise BadRequest(f"webhook url: {exc}", "gpu_tenancy.webhook_target_refused") from None
    with rt.transaction() as session:
        old = session.get(m.ProjectWebhook, project_id)
        before = {"url": old.url} if old else None
        row = webhooks.set_webhook(session, project_id, body["url"], body.get("secret"), rt.now())
        rt.audit(session, "webhook.update", project_id, project_id, before, {"url": row.url})   # never the secret
        # the secret is shown once, here: the receiver needs it to check signatures
        return {"webhook": render(row, with_secret=True)}


@bp.delete("/<project_id>")
def delete(project_id: str) -> ResponseReturnValue:
    rt.authorize("webhook:update", check_identifier("project_id", project_id))
    with rt.transaction() as session:
        row = load(session, project_id)
        rt.audit(session, "webhook.delete", project_id, project_id, {"url": row.url}, None)
        session.delete(row)
    return "", 204

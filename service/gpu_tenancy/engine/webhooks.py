"""Per-project webhooks for lease notices (the before-end warning).

A notice goes into an outbox row in the same transaction as the lease event it
tells of, so a crash cannot lose it; the engine then POSTs it, signed, and
retries a failed delivery with a doubling backoff up to a bounded number of
attempts. The signature is HMAC-SHA256 with the project's secret over
"<timestamp>.<body>", sent as `X-GPU-Tenancy-Signature: sha256=<hex>` beside
`X-GPU-Tenancy-Timestamp`, so a receiver can check both who sent it and that
it is not an old one replayed."""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import urllib.error
import urllib.request

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.engine import webhook_targets
from gpu_tenancy.engine.events import record_event
from gpu_tenancy.timeutil import rfc3339

log = logging.getLogger(__name__)
ENDING_SOON = "lease.ending_soon"
EVENTS = (ENDING_SOON,)
SIGNATURE_HEADER = "X-GPU-Tenancy-Signature"
TIMESTAMP_HEADER = "X-GPU-Tenancy-Timestamp"
EVENT_HEADER = "X-GPU-Tenancy-Event"
DELIVERY_HEADER = "X-GPU-Tenancy-Delivery"
PER_PASS = 10   # deliveries tried per engine tick: a slow receiver cannot stall the engine for long
ACTOR = "engine"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def set_webhook(session: Session, project_id: str, url: str, secret: str | None, now: int) -> m.ProjectWebhook:
    row = session.get(m.ProjectWebhook, project_id)
    if row is None:
        row = m.ProjectWebhook(project_id=project_id, created_at=utcnow_naive(now))
        session.add(row)
    row.url, row.secret, row.updated_at = url, secret or new_secret(), utcnow_naive(now)
    session.flush()
    return row


def enqueue(session: Session, lease: m.Lease, event: str, payload: dict, now: int) -> m.WebhookDelivery | None:
    """Write a notice to the outbox if the lease's project has a webhook."""
    if session.get(m.ProjectWebhook, lease.project_id) is None:
        return None
    delivery = m.WebhookDelivery(project_id=lease.project_id, lease_id=lease.id, event=event,
                                 body=json.dumps({"event": event, **payload}, sort_keys=True), status="pending",
                                 attempts=0, next_attempt_at=utcnow_naive(now), created_at=utcnow_naive(now))
    session.add(delivery)
    return delivery


def ending_soon_payload(lease: m.Lease, now: int) -> dict:
    return {"at": rfc3339(now), "lease": {
        "id": lease.id, "name": lease.name, "project_id": lease.project_id, "status": lease.status,
        "end": rfc3339(to_epoch(lease.end_at)), "href": f"/v1/leases/{lease.id}"},
        "message": f"lease {lease.name} ends at {rfc3339(to_epoch(lease.end_at))}; its VMs will be deleted then "
                   "and the data volume kept. Extend it with PATCH /v1/leases/{id} if the GPUs are free"}


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: it could lead where webhook_targets would refuse."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


OPENER = urllib.request.build_opener(NoRedirects)


def post(url: str, body: bytes, headers: dict, timeout: float) -> int:
    """POST and return the HTTP status (an exception for no answer at all)."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers},
                                     method="POST")
    try:
        with OPENER.open(request, timeout=timeout) as response:   # noqa: S310 (http/https only)
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def deliver_due(sessions, clock, config, send=post) -> int:
    """Try the notices that are due; returns how many were delivered."""
    now = clock.now()
    with session_scope(sessions) as session:
        due = [(d.id, d.project_id, d.lease_id, d.event, d.body, d.attempts) for d in session.scalars(
            select(m.WebhookDelivery).where(m.WebhookDelivery.status == "pending",
                                            m.WebhookDelivery.next_attempt_at <= utcnow_naive(now))
            .order_by(m.WebhookDelivery.next_attempt_at, m.WebhookDelivery.id).limit(PER_PASS))]
        hooks = {h.project_id: (h.url, h.secret) for h in session.scalars(
            select(m.ProjectWebhook).where(m.ProjectWebhook.project_id.in_({d[1] for d in due})))} if due else {}
    delivered = 0
    for delivery_id, project_id, lease_id, event, body, attempts in due:
        hook = hooks.get(project_id)
        error = None
        if hook is not None:
            url, secret = hook
            stamp = clock.now()
            headers = {SIGNATURE_HEADER: sign(secret, stamp, body.encode()), TIMESTAMP_HEADER: str(stamp),
                       EVENT_HEADER: event, DELIVERY_HEADER: str(delivery_id)}
            try:
                webhook_targets.check(url, config.webhook_allowed_networks, resolve=True)
                status = send(url, body.encode(), headers, config.webhook_timeout_seconds)
                error = None if 200 <= status < 300 else f"HTTP {status}"
            except Exception as exc:   # no answer: refused, timed out, bad host
                error = f"{type(exc).__name__}: {exc}"
        delivered += record_attempt(sessions, clock, config, delivery_id, lease_id, attempts + 1,
                                    error if hook else "the project's webhook was removed", dropped=hook is None)
    return delivered


def record_attempt(sessions, clock, config, delivery_id: int, lease_id: str, attempt: int, error: str | None,
                   dropped: bool = False) -> int:
    now = clock.now()
    with session_scope(sessions) as session:
        delivery = session.get(m.WebhookDelivery, delivery_id)
        lease = session.get(m.Lease, lease_id)
        delivery.attempts, delivery.last_error = attempt, error
        if error is None:
            delivery.status, delivery.delivered_at = "delivered", utcnow_naive(now)
            record_event(session, lease, "webhook", f"{delivery.event} delivered to the project's webhook "
                         f"(attempt {attempt})", now, ACTOR)
            return 1
        if dropped or attempt >= config.webhook_max_attempts:
            delivery.status = "dropped" if dropped else "failed"
            record_event(session, lease, "webhook", f"{delivery.event} not delivered after {attempt} attempt(s): "
                         f"{error}", now, ACTOR)
            return 0
        wait = min(config.webhook_backoff_seconds * 2 ** (attempt - 1), config.webhook_backoff_max_seconds)
        delivery.next_attempt_at = utcnow_naive(now + wait)
        log.info("webhook delivery %s failed (%s); retrying in %s s", delivery_id, error, wait)
        return 0

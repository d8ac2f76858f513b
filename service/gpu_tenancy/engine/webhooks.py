"""Per-project webhooks for lease notices (the before-end warning).

A notice goes into an outbox row in the same transaction as the lease event it
tells of, so a crash cannot lose it; the outbox worker (engine/outbox.py), apart
from the engine's tick, then POSTs it, signed, and retries a failed delivery
with a doubling backoff up to a bounded number of attempts. The signature is
HMAC-SHA256 with the project's secret over "<timestamp>.<body>", sent as
`X-GPU-Tenancy-Signature: sha256=<hex>` beside `X-GPU-Tenancy-Timestamp`, so a
receiver can check both who sent it and that it is not an old one replayed.
`X-GPU-Tenancy-Delivery` is the row's id, the same on every try: a crash or a change
of leader between a POST and its record sends the notice again (at least once), and
the receiver drops the repeat by it."""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass

from sqlalchemy import exists, select
from sqlalchemy.orm import Session, aliased

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.engine import webhook_targets
from gpu_tenancy.engine.events import record_event
from gpu_tenancy.timeutil import rfc3339

log = logging.getLogger(__name__)
ENDING_SOON = "lease.ending_soon"
IDLE = "lease.idle"   # its GPUs idle past the operator's rule (engine/gpu_activity.py)
PARKED = "lease.parked"     # its VMs shelved and GPUs given back by an idle rule (engine/park.py)
RESUMED = "lease.resumed"   # its VMs back, active again (engine/resume.py)
EVENTS = (ENDING_SOON, IDLE, PARKED, RESUMED)
SIGNATURE_HEADER = "X-GPU-Tenancy-Signature"
TIMESTAMP_HEADER = "X-GPU-Tenancy-Timestamp"
EVENT_HEADER = "X-GPU-Tenancy-Event"
DELIVERY_HEADER = "X-GPU-Tenancy-Delivery"
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
        "message": f"lease {lease.name} ends at {rfc3339(to_epoch(lease.end_at))}; {what_the_end_deletes(lease)}. "
                   "Extend it with PATCH /v1/leases/{id} if the GPUs are free"}


def what_the_end_deletes(lease: m.Lease) -> str:
    """What the end does to the lease's VMs, in the warning before it: a kept data volume is
    promised only to a lease that has one (an owner told so would leave their data on the disks)."""
    if lease.volume_id or lease.volume_size_gb:
        return "its VMs will be deleted then and the data volume kept"
    return "its VMs will be deleted then with what is on their disks (the lease has no data volume)"


def idle_payload(lease: m.Lease, now: int, idle_seconds: int, message: str) -> dict:
    return {"at": rfc3339(now), "idle_seconds": idle_seconds, "lease": {
        "id": lease.id, "name": lease.name, "project_id": lease.project_id, "status": lease.status,
        "end": rfc3339(to_epoch(lease.end_at)), "href": f"/v1/leases/{lease.id}"}, "message": message}


def park_payload(lease: m.Lease, now: int, message: str) -> dict:
    return {"at": rfc3339(now), "lease": {
        "id": lease.id, "name": lease.name, "project_id": lease.project_id, "status": lease.status,
        "end": rfc3339(to_epoch(lease.end_at)), "resume_by": rfc3339(to_epoch(lease.resume_by)),
        "href": f"/v1/leases/{lease.id}"}, "message": message}


@dataclass(frozen=True)
class Due:
    """A notice to send, with the project's webhook as it was read (None: removed)."""
    id: int
    project_id: str
    lease_id: str
    event: str
    body: str
    attempts: int
    url: str | None
    secret: str | None
    failing: bool = False   # the project's receiver failed its last try (a notice of it waits for a retry)


def due(sessions, now: int, skip_ids: set[int], skip_projects: set[str], limit: int,
        failing_ok: bool = True) -> list[Due]:
    """The notices due, oldest first, but for those being sent (`skip_ids`) and those of
    projects whose receiver has all the workers it may have (`skip_projects`), and, unless
    `failing_ok`, those of projects whose receiver is failing. A lease's notice waits while
    an earlier one of the same lease is pending (being sent, or waiting for its retry): a
    receiver gets a lease's notices in the order they were written, so the last
    `lease.parked` it has is the slot, not one a retry delivered late."""
    earlier, tried = aliased(m.WebhookDelivery), aliased(m.WebhookDelivery)
    # a pending notice that was tried failed that try: its project's receiver is failing (down,
    # hung, answering 5xx) until a try succeeds, and its notices keep out of the workers' reserve
    failing = exists().where(tried.project_id == m.WebhookDelivery.project_id, tried.status == "pending",
                             tried.attempts > 0)
    with session_scope(sessions) as session:
        query = (select(m.WebhookDelivery, m.ProjectWebhook.url, m.ProjectWebhook.secret, failing)
                 .outerjoin(m.ProjectWebhook, m.ProjectWebhook.project_id == m.WebhookDelivery.project_id)
                 .where(m.WebhookDelivery.status == "pending", m.WebhookDelivery.next_attempt_at <= utcnow_naive(now),
                        ~exists().where(earlier.lease_id == m.WebhookDelivery.lease_id, earlier.status == "pending",
                                        earlier.id < m.WebhookDelivery.id))
                 .order_by(m.WebhookDelivery.next_attempt_at, m.WebhookDelivery.id).limit(limit))
        if skip_ids:
            query = query.where(m.WebhookDelivery.id.not_in(skip_ids))
        if skip_projects:
            query = query.where(m.WebhookDelivery.project_id.not_in(skip_projects))
        if not failing_ok:
            query = query.where(~failing)
        return [Due(d.id, d.project_id, d.lease_id, d.event, d.body, d.attempts, url, secret, bool(fails))
                for d, url, secret, fails in session.execute(query)]


def attempt(sessions, clock, config, notice: Due, send) -> int:
    """Check and pin the notice's target, send it there with `send(target, body, headers,
    deadline)`, and record how it went; returns 1 if delivered."""
    if notice.url is None:
        return record_attempt(sessions, clock, config, notice.id, notice.lease_id, notice.attempts + 1,
                              "the project's webhook was removed", dropped=True)
    assert notice.secret is not None   # the webhook's, with its url
    body = notice.body.encode()
    stamp = clock.now()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(notice.secret, stamp, body),
               TIMESTAMP_HEADER: str(stamp), EVENT_HEADER: notice.event, DELIVERY_HEADER: str(notice.id)}
    try:
        target = webhook_targets.pin(notice.url, config.webhook_allowed_networks)
        status = send(target, body, headers, config.webhook_timeout_seconds)
        error = None if 200 <= status < 300 else f"HTTP {status}"
    except Exception as exc:   # no answer: refused target, refused connection, deadline passed, bad TLS
        error = f"{type(exc).__name__}: {exc}"
    return record_attempt(sessions, clock, config, notice.id, notice.lease_id, notice.attempts + 1, error)


def record_attempt(sessions, clock, config, delivery_id: int, lease_id: str, attempt: int, error: str | None,
                   dropped: bool = False) -> int:
    now = clock.now()
    with session_scope(sessions) as session:
        delivery = session.get_one(m.WebhookDelivery, delivery_id)
        lease = session.get_one(m.Lease, lease_id)
        delivery.attempts, delivery.last_error = attempt, error
        if error is None:
            delivery.status, delivery.delivered_at = "delivered", utcnow_naive(now)
            record_event(session, lease, "webhook", f"{delivery.event} delivered to the project's webhook "
                         f"(attempt {attempt})", now, ACTOR)
            return 1
        # The tenant's event tells only that it failed: the error itself (how a name resolved, whether
        # a host answered) would let a tenant map the networks the engine reaches. Admins see it in
        # GET /v1/webhooks/{project_id} and the log.
        if dropped or attempt >= config.webhook_max_attempts:
            delivery.status = "dropped" if dropped else "failed"
            why = error if dropped else (f"delivery failed (each attempt must be answered 2xx within "
                                         f"{config.webhook_timeout_seconds:g} s)")
            record_event(session, lease, "webhook", f"{delivery.event} not delivered after {attempt} attempt(s): "
                         f"{why}", now, ACTOR)
            log.warning("webhook delivery %s to project %s given up: %s", delivery_id, delivery.project_id, error)
            return 0
        wait = backoff(config, attempt)
        delivery.next_attempt_at = utcnow_naive(now + wait)
        log.info("webhook delivery %s failed (%s); retrying in %s s", delivery_id, error, wait)
        return 0


def backoff(config, attempt: int) -> int:
    """Seconds before the try after failed try number `attempt` (1 for the first)."""
    return min(config.webhook_backoff_seconds * 2 ** (attempt - 1), config.webhook_backoff_max_seconds)

"""Lease notifications on the message bus (oslo.messaging), as Blazar sends them
(`lease.create`, `lease.update`, `lease.delete`, `lease.event.start_lease`,
`lease.event.end_lease`, `lease.event.before_end_lease`, with Blazar's payload),
and gpu-tenancy's own (`lease.queued`, `lease.failed` with its failure class,
`lease.preempted`), so that what follows Blazar's (CloudKitty, Ceilometer,
Warre) follows gpu-tenancy's.

A notice is written to the bus outbox (bus_notices) in the transaction of the
change it tells of, so a crash cannot lose it, and only when the operator set
`notifications_transport_url` (the sessions say so: make_sessionmaker). The
outbox worker (engine/outbox.py) sends them after, oldest first, one at a time
so a consumer sees a lease's notices in the order they happened, and retries a
failed send with a doubling backoff, holding back the later ones, until the bus
takes it: billing must not miss an end. A crash between the send and its record
sends that notice again (at least once); its message_id stays the same, so a
consumer can drop the second copy."""
from __future__ import annotations

import json
import logging
import uuid
from typing import Callable

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.domain import blazar
from gpu_tenancy.domain.states import FINAL, LeaseState

log = logging.getLogger(__name__)
S = LeaseState

CREATE, UPDATE, DELETE = "lease.create", "lease.update", "lease.delete"
START_LEASE, END_LEASE = "lease.event.start_lease", "lease.event.end_lease"
BEFORE_END_LEASE = "lease.event.before_end_lease"
QUEUED, FAILED, PREEMPTED = "lease.queued", "lease.failed", "lease.preempted"
EVENT_TYPES = (CREATE, UPDATE, DELETE, START_LEASE, END_LEASE, BEFORE_END_LEASE, QUEUED, FAILED, PREEMPTED)
SESSION_FLAG = "bus_notifications"   # in Session.info: notices are written (the operator turned them on)
_MESSAGES = uuid.UUID("0e6d1c0b-3f57-4b0e-9d4e-3f1f6c1a7b55")   # names a notice's message_id


def enabled(session: Session) -> bool:
    return bool(session.info.get(SESSION_FLAG))


def on_transition(session: Session, row: m.Lease, before: LeaseState | None, after: LeaseState, now: int) -> None:
    """The notices a change of state sends (engine/events.py calls this for every one)."""
    if not enabled(session):
        return
    if before is None:
        enqueue(session, row, CREATE, now)
    if after is S.QUEUED:
        enqueue(session, row, QUEUED, now, reasons=list(row.queue_reasons or []))
    if after is S.ACTIVE and not started_before(session, row.id):
        enqueue(session, row, START_LEASE, now)   # once: a lease moved off a down host runs on, not anew
    if after in (S.ENDED, S.PREEMPTED) or (after is S.FAILED and before is S.ENDING) or \
            (after in FINAL and started_before(session, row.id)):
        # its VMs are gone: what billing closes the lease on, so one that started gets it whatever
        # its end (moved off a down host, then cancelled, expired or failed while waiting)
        enqueue(session, row, END_LEASE, now)
    if after is S.PREEMPTED:
        enqueue(session, row, PREEMPTED, now, early_end_kind=row.early_end_kind, for_lease=row.early_end_for,
                reason=row.early_end_reason)
    if after is S.FAILED:
        enqueue(session, row, FAILED, now, failure_class=row.failure_class, failure_message=row.failure_message)


def started_before(session: Session, lease_id: str) -> bool:
    with session.no_autoflush:   # the transition being recorded is not in the database yet
        return bool(session.scalar(select(exists().where(m.Event.lease_id == lease_id,
                                                         m.Event.to_state == S.ACTIVE.value))))


def enqueue(session: Session, row: m.Lease, event_type: str, now: int, **extra) -> m.BusNotice | None:
    """Write a notice (if notifications are on) in the caller's transaction."""
    if not enabled(session):
        return None
    notice = m.BusNotice(lease_id=row.id, event_type=event_type,
                         payload=json.dumps({**payload(row), **extra}, sort_keys=True), status="pending",
                         attempts=0, next_attempt_at=utcnow_naive(now), created_at=utcnow_naive(now))
    session.add(notice)
    return notice


def payload(row: m.Lease) -> dict:
    """Blazar's lease payload (blazar/notification/api.py: format_lease_payload), then
    gpu-tenancy's own fields beside it (a Blazar consumer ignores keys it does not know)."""
    start, end = blazar.window(row.start_at, row.end_at, row.queue_eta or row.earliest_start, row.duration)
    shown = blazar.blazar_status(row.status)
    created, updated = blazar.date(row.created_at), blazar.date(row.updated_at)
    reservation = {
        "id": blazar.reservation_id(row.id), "lease_id": row.id, "resource_id": row.flavor_id,
        "resource_type": blazar.FLAVOR_INSTANCE, "status": shown.reservation,
        "amount": row.instances, "flavor_id": row.flavor_id, "affinity": None, "resource_properties": "",
        "created_at": created, "updated_at": updated}
    events = [{"lease_id": row.id, "event_type": kind, "time": blazar.date(at), "status": shown.event(kind)}
              for kind, at in ((blazar.START_LEASE, start), (blazar.END_LEASE, end))]
    return {
        # Blazar's keys
        "lease_id": row.id, "user_id": row.user_id, "project_id": row.project_id, "trust_id": None,
        "start_date": blazar.date(start), "end_date": blazar.date(end), "status": shown.lease,
        "reservations": [reservation], "events": events, "name": row.name,
        "created_at": created, "updated_at": updated, "degraded": False,
        # gpu-tenancy's
        "state": row.status, "shape": row.shape, "gpu_model": row.gpu_model, "gpus_per_instance": row.gpus_per_vm,
        "instances": row.instances, "gpus": row.gpus_per_vm * row.instances, "duration": row.duration,
        "flavor_name": row.flavor_name, "priority_class": row.priority_class, "preemptible": row.preemptible,
    }


def message_id(notice_id: int, lease_id: str) -> str:
    """The same for every attempt to send one notice: a consumer drops a repeat by it."""
    return str(uuid.uuid5(_MESSAGES, f"{lease_id}/{notice_id}"))


Send = Callable[[dict], None]   # sends one message envelope; raises if the bus did not take it


def send_due(sessions, clock, config, send: Send, limit: int = 100, keep_going=lambda: True) -> int:
    """Send the pending notices in order, each recorded sent in its own transaction; stop at
    the first that fails (it is retried after its backoff, the later ones wait for it).
    Returns how many were sent."""
    sent = 0
    while True:
        with session_scope(sessions) as session:
            batch = [(n.id, n.lease_id, n.event_type, n.payload, n.attempts, n.next_attempt_at, n.created_at)
                     for n in session.scalars(select(m.BusNotice).where(m.BusNotice.status == "pending")
                                              .order_by(m.BusNotice.id).limit(limit))]
        if not batch:
            return sent
        for notice_id, lease_id, event_type, body, attempts, next_at, created in batch:
            if next_at > utcnow_naive(clock.now()) or not keep_going():
                return sent
            envelope = {"message_id": message_id(notice_id, lease_id), "publisher_id": config.notifications_publisher_id,
                        "event_type": event_type, "priority": "INFO", "payload": json.loads(body),
                        "timestamp": str(created)}
            try:
                send(envelope)
            except Exception as exc:
                record_failure(sessions, clock, config, notice_id, attempts + 1, f"{type(exc).__name__}: {exc}")
                return sent
            with session_scope(sessions) as session:
                notice = session.get_one(m.BusNotice, notice_id)
                notice.status, notice.attempts = "sent", attempts + 1   # last_error: kept, what went before
                notice.sent_at = utcnow_naive(clock.now())
            sent += 1


def record_failure(sessions, clock, config, notice_id: int, attempt: int, error: str) -> None:
    wait = min(2 ** (attempt - 1), config.notifications_backoff_max_seconds)
    with session_scope(sessions) as session:
        notice = session.get_one(m.BusNotice, notice_id)
        notice.attempts, notice.last_error = attempt, error
        notice.next_attempt_at = utcnow_naive(clock.now() + wait)
    log.warning("bus notification %s not sent (attempt %s: %s); retrying in %s s", notice_id, attempt, error, wait)


class BusSender:
    """Sends envelopes with oslo.messaging to `<topic>.info` in the configured exchange.

    It hands the envelope to the transport itself rather than through oslo.messaging's
    Notifier: the Notifier's drivers log a failed send and return as if it had gone,
    and the outbox must know, to keep the notice and retry it (oslo.messaging is pinned
    in setup.cfg for this)."""

    def __init__(self, config):
        import oslo_messaging   # only when notifications are on: it brings eventlet and kombu
        from oslo_config import cfg
        self._messaging = oslo_messaging
        conf = cfg.ConfigOpts()
        conf([], project="gpu-tenancy", default_config_files=[], default_config_dirs=[])
        self.transport = oslo_messaging.get_notification_transport(conf, url=config.notifications_transport_url)
        self.target = oslo_messaging.Target(topic=f"{config.notifications_topic}.info",
                                            exchange=config.notifications_exchange)

    def __call__(self, envelope: dict) -> None:
        # retry=1: a broker that is down fails this attempt soon; the outbox retries it later
        self.transport._send_notification(self.target, {}, envelope, version=2.0, retry=1)

    def close(self) -> None:
        self.transport.cleanup()

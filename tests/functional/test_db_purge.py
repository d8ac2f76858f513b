"""`gpu-tenancy db purge` (db/purge.py): old webhook deliveries, bus notices, audit records and
expired dashboard logins go, in batches; nothing the outbox, a lease, a figure or the quota reads
does. The command line itself is in test_cli.py."""
from __future__ import annotations

import pytest
from sqlalchemy import event, func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.db import purge
from gpu_tenancy.db.session import session_scope, utcnow_naive
from tests.conftest import headers

DAY = 86400


def lease(client, name: str) -> str:
    reply = client.post("/v1/leases", json={"name": name, "shape": "a100.x2", "duration": "PT1H"}, headers=headers())
    assert reply.status_code == 201, reply.text
    return reply.get_json()["lease"]["id"]


def delivery(lease_id: str, status: str, at: int) -> m.WebhookDelivery:
    return m.WebhookDelivery(project_id="ml-vision", lease_id=lease_id, event="lease.idle", body="{}", status=status,
                             attempts=1, next_attempt_at=utcnow_naive(at), created_at=utcnow_naive(at),
                             delivered_at=utcnow_naive(at) if status == "delivered" else None)


def notice(lease_id: str, status: str, at: int) -> m.BusNotice:
    return m.BusNotice(lease_id=lease_id, event_type="lease.create", payload="{}", status=status, attempts=1,
                       next_attempt_at=utcnow_naive(at), created_at=utcnow_naive(at),
                       sent_at=utcnow_naive(at) if status == "sent" else None)


def login(name: str, expires: int) -> m.DashboardSession:
    return m.DashboardSession(id_hash=name, user_id="alice", user_name="alice", csrf_token="x",
                              created_at=utcnow_naive(expires - 3600), expires_at=utcnow_naive(expires))


def rows(sessions, model, *columns):
    with session_scope(sessions) as session:
        return sorted(tuple(r) for r in session.execute(select(*columns))) if columns else \
            session.scalar(select(func.count()).select_from(model))


def test_purge_removes_the_old_finished_rows_only_and_counts_them(client, sessions, clock):
    old = clock.now()
    ran = lease(client, "ran")   # its create is an old audit record
    with session_scope(sessions) as session:
        session.add_all([delivery(ran, status, old) for status in ("delivered", "failed", "dropped", "pending")])
        session.add_all([notice(ran, status, old) for status in ("sent", "pending")])
        session.add(login("expired-long-ago", old + 3600))
    clock.advance(40 * DAY)
    now = clock.now()
    lease(client, "later")   # a recent audit record
    with session_scope(sessions) as session:
        session.add_all([delivery(ran, "delivered", now), notice(ran, "sent", now), login("live", now + 3600)])
    leases, events, allocations = (rows(sessions, t) for t in (m.Lease, m.Event, m.Allocation))

    assert purge.purge(sessions, now - 30 * DAY) == {"webhook deliveries": 3, "bus notices": 1, "audit records": 1,
                                                     "dashboard logins": 1}
    # the pending ones are the outbox's still; the recent ones are newer than the cutoff
    assert rows(sessions, None, m.WebhookDelivery.status, m.WebhookDelivery.created_at) == [
        ("delivered", utcnow_naive(now)), ("pending", utcnow_naive(old))]
    assert rows(sessions, None, m.BusNotice.status, m.BusNotice.created_at) == [
        ("pending", utcnow_naive(old)), ("sent", utcnow_naive(now))]
    assert rows(sessions, None, m.AuditRecord.action, m.AuditRecord.at) == [("lease.create", utcnow_naive(now))]
    assert rows(sessions, None, m.DashboardSession.id_hash) == [("live",)]
    # leases, their history and the ledger are not the purge's: figures, usage and quotas read them
    assert (rows(sessions, m.Lease), rows(sessions, m.Event), rows(sessions, m.Allocation)) == (
        leases, events, allocations)


def test_the_newest_row_keeps_its_id_from_being_given_again(client, sessions, clock):
    """SQLite numbers a new row after the highest id there: with the newest deleted, the next
    delivery would carry the id (X-GPU-Tenancy-Delivery) a receiver already has from another."""
    ran = lease(client, "ran")
    with session_scope(sessions) as session:
        session.add_all([delivery(ran, "delivered", clock.now()) for _ in range(3)])
    clock.advance(40 * DAY)
    assert purge.purge(sessions, clock.now() - 30 * DAY)["webhook deliveries"] == 2
    [(kept,)] = rows(sessions, None, m.WebhookDelivery.id)
    with session_scope(sessions) as session:
        added = delivery(ran, "pending", clock.now())
        session.add(added)
        session.flush()
        assert added.id > kept


def test_the_rows_go_a_batch_per_transaction(client, sessions, clock):
    ran = lease(client, "ran")
    with session_scope(sessions) as session:
        session.add_all([delivery(ran, "delivered", clock.now()) for _ in range(7)])
    clock.advance(40 * DAY)
    commits, deletes = [], []

    def committed(conn):
        commits.append(1)

    def count(conn, cursor, statement, *_):
        if statement.startswith("DELETE FROM webhook_deliveries"):
            deletes.append(len(commits))   # the commits before it
    bind = sessions.kw["bind"]
    event.listen(bind, "commit", committed)
    event.listen(bind, "before_cursor_execute", count)
    try:
        assert purge.purge(sessions, clock.now() - 30 * DAY, batch=2)["webhook deliveries"] == 6
    finally:
        event.remove(bind, "commit", committed)
        event.remove(bind, "before_cursor_execute", count)
    # 2 + 2 + 2, each committed before the next: the API and the engine wait one batch at most
    assert len(deletes) == 3 and deletes[0] < deletes[1] < deletes[2]


@pytest.mark.parametrize("before, words", [(DAY, "in the future"), (-3600, "less than a day ago"),
                                           (-DAY + 1, "less than a day ago")])
def test_a_cutoff_in_the_future_or_under_a_day_old_is_refused(before, words):
    now = 1_800_000_000
    with pytest.raises(ValueError, match=words):
        purge.check_cutoff(now + before, now)
    purge.check_cutoff(now - DAY, now)   # a day old: taken

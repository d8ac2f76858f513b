"""`gpu-tenancy db purge` (db/purge.py): old webhook deliveries, bus notices, audit records and
expired dashboard logins go, in batches; nothing the outbox, a lease, a figure or the quota reads
does. The command line itself is in test_cli.py."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import event, func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.db import purge
from gpu_tenancy.db.session import session_scope, utcnow_naive
from tests.conftest import PG_URL, headers

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


def test_two_purges_at_once_share_the_rows_out_and_count_each_once(client, sessions, clock):
    """A timer on each of two hosts sharing the database: both read the same first batch before
    either deletes it (on PostgreSQL a read does not wait for the other's delete); the one whose
    DELETE finds the rows gone counted them all the same, and the two reports added up to more
    rows than there were. On SQLite a batch's read and delete hold the write lock together, so
    the two never read the same batch: the meeting below times out and they take turns."""
    ran = lease(client, "ran")
    with session_scope(sessions) as session:
        session.add_all([delivery(ran, "delivered", clock.now()) for _ in range(9)])
    clock.advance(40 * DAY)
    before = rows(sessions, m.WebhookDelivery)
    meet = threading.Barrier(2, timeout=1)
    first = threading.local()

    def at_the_first_delete(conn, cursor, statement, *_):
        if statement.startswith("DELETE FROM webhook_deliveries") and not getattr(first, "done", False):
            first.done = True
            try:
                meet.wait()
            except threading.BrokenBarrierError:   # SQLite: the other waits for the write lock
                pass
    bind = sessions.kw["bind"]
    event.listen(bind, "before_cursor_execute", at_the_first_delete)
    try:
        with ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(lambda _: purge.purge(sessions, clock.now() - 30 * DAY, batch=4), range(2)))
    finally:
        event.remove(bind, "before_cursor_execute", at_the_first_delete)
    deleted = before - rows(sessions, m.WebhookDelivery)
    assert deleted == 8   # all but the newest (its id is kept from being given again)
    assert sum(r["webhook deliveries"] for r in reports) == deleted, reports


@pytest.mark.skipif(bool(PG_URL), reason="the file of an SQLite database")
def test_vacuum_gives_the_purged_rows_space_back_to_the_disk(client, sessions, clock, db_url):
    """SQLite keeps a deleted row's pages in the file: purging alone shrinks nothing."""
    path = db_url.removeprefix("sqlite:///")

    def size() -> int:   # the database is the file and its WAL
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    with session_scope(sessions) as session:
        session.add_all([m.AuditRecord(at=utcnow_naive(clock.now()), action="quota.update", target_type="quota",
                                       target_id="ml-vision", outcome="success", after={"note": "x" * 2000})
                         for _ in range(1000)])
    clock.advance(40 * DAY)
    assert purge.purge(sessions, clock.now() - 30 * DAY)["audit records"] == 999
    purged = size()
    assert purge.vacuum(sessions.kw["bind"]) == "vacuumed the file"
    assert size() < purged / 4, (size(), purged)
    assert rows(sessions, m.AuditRecord) == 1   # and the database still reads


@pytest.mark.skipif(not PG_URL, reason="PostgreSQL's VACUUM")
def test_vacuum_on_postgresql_vacuums_and_analyzes_the_purged_tables(sessions):
    bind = sessions.kw["bind"]
    assert purge.vacuum(bind).startswith("vacuumed and analyzed webhook_deliveries, bus_notices")
    with bind.connect() as conn:
        done = conn.exec_driver_sql("SELECT relname FROM pg_stat_user_tables WHERE last_vacuum IS NOT NULL "
                                    "AND last_analyze IS NOT NULL").scalars().all()
    assert {kind.model.__tablename__ for kind in purge.KINDS} <= set(done)

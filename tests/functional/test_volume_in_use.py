"""A data volume is the volume of one unfinished lease: a second lease asking for it is refused
with 409 and nothing of it kept, also when the two ask at the same moment (on PostgreSQL the
second create waits, from its check to the first's commit: db/session.py key_lock)."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, func, select, text

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.states import FINAL
from gpu_tenancy.engine import leases
from tests.conftest import PG_URL, headers


@pytest.fixture
def volume(cloud):
    return cloud.add_volume("ml-vision", 200, "my-dataset")


def ask(volume: str) -> dict:
    return {"shape": "a100.x1", "duration": "PT2H", "volume": {"id": volume}}


def holders(sessions, volume: str) -> dict:
    """The unfinished leases with the volume, and how many leases, events and records there are."""
    with session_scope(sessions) as s:
        return {"unfinished": list(s.scalars(select(m.Lease.id).where(
                    m.Lease.volume_id == volume, m.Lease.status.not_in([x.value for x in FINAL])))),
                "leases": s.scalar(select(func.count()).select_from(m.Lease)),
                "events": s.scalar(select(func.count()).select_from(m.Event)),
                "records": s.scalar(select(func.count()).select_from(m.AuditRecord))}


def test_a_volume_in_use_is_refused_and_free_again_once_its_lease_is_finished(client, sessions, volume):
    made = client.post("/v1/leases", json=ask(volume), headers=headers())
    assert made.status_code == 201, made.get_json()
    first = made.get_json()["lease"]["id"]
    before = holders(sessions, volume)
    again = client.post("/v1/leases", json=ask(volume), headers=headers())
    assert again.status_code == 409, again.get_json()
    error = again.get_json()["errors"][0]
    assert error["code"] == codes.VOLUME_IN_USE and first in error["detail"] and volume in error["detail"]
    assert holders(sessions, volume) == before   # no lease, event or record of the refused one
    assert client.delete(f"/v1/leases/{first}", headers=headers()).status_code in (200, 202, 204)
    again = client.post("/v1/leases", json=ask(volume), headers=headers())
    assert again.status_code == 201, again.get_json()
    assert holders(sessions, volume)["unfinished"] == [again.get_json()["lease"]["id"]]


@pytest.mark.skipif(not PG_URL, reason="on SQLite a create holds the database's write lock from its start: "
                                       "two cannot pass the check at once")
def test_two_creates_with_one_volume_at_once_make_one_lease(app, sessions, volume, db_url):
    """The first create is held after its check until the second has either finished or is
    waiting for a lock: without the key lock the second passes its check (the first's lease is
    not committed) and both leases are made."""
    checked, release = threading.Event(), threading.Event()
    check = leases.check_volume_free
    first_thread: list[int] = []

    def check_then_hold(*args):
        check(*args)
        if threading.get_ident() == first_thread[0]:
            checked.set()
            assert release.wait(60)

    def create():
        reply = app.test_client().post("/v1/leases", json=ask(volume), headers=headers())
        return reply.status_code, reply.get_json()

    def first():
        first_thread.append(threading.get_ident())
        return create()

    watcher = create_engine(db_url)
    try:
        leases.check_volume_free = check_then_hold
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(first)
            assert checked.wait(60)
            b = pool.submit(create)
            deadline = time.monotonic() + 30
            while not b.done() and time.monotonic() < deadline:   # until it finished or waits on a lock
                with watcher.connect() as c:
                    if c.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                     "AND datname = current_database()")):
                        break
                time.sleep(0.05)
            release.set()
            answers = [a.result(), b.result()]
    finally:
        leases.check_volume_free = check
        watcher.dispose()
    assert [code for code, _ in answers] == [201, 409], answers
    assert answers[1][1]["errors"][0]["code"] == codes.VOLUME_IN_USE
    state = holders(sessions, volume)
    assert state["unfinished"] == [answers[0][1]["lease"]["id"]] and state["leases"] == 1 and state["records"] == 1

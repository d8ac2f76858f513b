"""The ledger under concurrent requests, and the engine's leader lock."""
from __future__ import annotations

import threading

from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine.runner import EngineRunner
from tests.conftest import headers
from tests.ledger_checks import overcommits_in, quota_overruns_in


def overcommits(sessions) -> list[str]:
    """Every instant at which some host holds more GPUs than it has (tests/ledger_checks.py)."""
    with sessions() as s:
        return overcommits_in(s)


def test_concurrent_requests_never_overcommit_a_host(app, sessions):
    # 32 A100 in the cloud; 48 requests of 1-4 GPUs from two projects at once
    shapes = ["a100.x1", "a100.x2", "a100.x4"]
    results, errors = [], []

    def worker(i):
        try:
            client = app.test_client()
            project = ("ml-vision", "nlp-lab")[i % 2]
            response = client.post("/v1/leases", json={"shape": shapes[i % 3], "duration": 3600 * (1 + i % 5)},
                                   headers=headers(project))
            results.append(response.status_code)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results.count(201) == 48
    assert overcommits(sessions) == []
    with sessions() as s:
        statuses = list(s.scalars(select(m.Lease.status)))
    assert "scheduled" in statuses and "queued" in statuses  # the cloud filled, the rest wait
    assert quota_overruns(sessions) == []


def quota_overruns(sessions) -> list[str]:
    """Every instant at which a project holds more GPUs of a model than its quota and borrowing allow
    (tests/ledger_checks.py)."""
    with sessions() as s:
        return quota_overruns_in(s)


def test_a_second_engine_waits_as_standby_until_the_leader_is_gone(runtime):
    leader = runtime.engine
    standby = EngineRunner(leader.lifecycle)
    assert leader.run_once() is True
    assert standby.run_once() is False
    runtime.clock.advance(runtime.config.leader_lease_seconds + 1)   # the leader stopped renewing
    assert standby.run_once() is True
    assert leader.run_once() is False
    with session_scope(runtime.sessions) as s:
        assert s.get(m.Lock, "engine").holder == standby.holder


def test_a_leader_whose_tick_outlasts_its_lease_keeps_leading_and_the_standby_waits(runtime, monkeypatch):
    """A tick can take longer than the leadership's lease (on OpenStack a volume is waited for up
    to 300 s in it): renewed only as ticks began, the standby took over in the middle of one and
    both engines acted on the same leases. The renewal runs on its own timer beside the tick."""
    from apscheduler.schedulers.background import BackgroundScheduler
    leader = runtime.engine
    standby = EngineRunner(leader.lifecycle)
    assert leader.run_once() is True
    lease = runtime.config.leader_lease_seconds
    for _ in range(4):                                   # one tick, four leases long, renewed beside it
        runtime.clock.advance(lease // 2)
        leader.renew()
        assert standby.run_once() is False
    monkeypatch.setattr(leader.scheduler, "start", lambda: BackgroundScheduler.start(leader.scheduler, paused=True))
    leader.start()                                       # the renewal is on the scheduler, at a third of the lease
    try:
        assert leader.scheduler.get_job("leadership").trigger.interval.total_seconds() == lease / 3
    finally:
        leader.scheduler.shutdown(wait=False)

    runtime.clock.advance(lease + 1)                     # a leader that stalled past its lease
    assert standby.run_once() is True
    leader.renew()                                       # finds it taken: it stops leading
    assert leader.leading is False and leader.run_once() is False

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

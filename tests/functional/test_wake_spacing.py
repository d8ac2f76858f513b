"""A create fitted into the plan and a cancel taken out of it (a long queue) wake the engine for a
replan that only moves other leases earlier: it begins no sooner than
engine_wake_min_interval_seconds after the last full tick began (engine/runner.py: wake), so a
member's create-and-cancel loop cannot keep the engine replanning back to back. Every other wake
ticks at once: a lease that can start now is started at once; one that the replan alone can start
(a waiting lease's cancel freed its window) is started within the interval."""
from __future__ import annotations

import math
import random
import threading
import time

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from tests.conftest import headers


@pytest.fixture
def engine(runtime):
    """The engine's scheduler running, its timer ten minutes away: every tick after the first
    is a wake's."""
    runtime.fits.min_waiting = 0   # (as a queue of plan_insert_min_waiting leases does)
    runtime.config.engine_tick_seconds = 600
    yield runtime.engine
    if runtime.engine.scheduler.running:
        runtime.engine.scheduler.shutdown(wait=True)


class CountingTicks:
    """lifecycle.tick replaced: when each began (monotonic), each taking `seconds` (a replan's CPU)."""

    def __init__(self, seconds: float):
        self.seconds, self.began = seconds, []
        self.lock = threading.Lock()

    def __call__(self) -> bool:
        with self.lock:
            self.began.append(time.monotonic())
        time.sleep(self.seconds)
        return False


def create(client, project: str, shape: str, duration: str) -> dict:
    reply = client.post("/v1/leases", json={"shape": shape, "duration": duration}, headers=headers(project))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def fill(client) -> None:
    """Every A100 taken for 3 h but four GPUs of one host, free in an hour (16 of ml-vision's
    quota of 16 then; nlp-lab's 16 of 16)."""
    for project, shape, duration in (("nlp-lab", "a100.x8", "PT3H"), ("nlp-lab", "a100.x8", "PT3H"),
                                     ("ml-vision", "a100.x8", "PT3H"), ("ml-vision", "a100.x4", "PT1H")):
        assert create(client, project, shape, duration)["status"] == "scheduled"


def wait_for(what, seconds: float) -> float | None:
    """Seconds until what() holds, or None after `seconds`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if what():
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def status(runtime, lease_id: str) -> str:
    with session_scope(runtime.sessions) as session:
        return session.scalar(select(m.Lease.status).where(m.Lease.id == lease_id))


def loop_create_cancel(client, seconds: float, pause: random.Random | None = None) -> tuple[float, int, float]:
    """One member's loop: a create fitted into the plan, then its cancel taken out of it, for
    `seconds`; returns (when it began, wakes sent, when the last was sent)."""
    t0, wakes = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        lease = create(client, "ml-vision", "a100.x8", "PT1H")
        assert lease["status"] == "queued"
        assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code == 204
        wakes += 2
        if pause is not None:
            time.sleep(pause.uniform(0, 0.1))
    return t0, wakes, time.monotonic()


def test_a_create_and_cancel_loop_brings_at_most_one_replan_per_interval(client, runtime, engine, monkeypatch):
    interval = 0.5
    runtime.config.engine_wake_min_interval_seconds = interval
    fill(client)
    create(client, "nlp-lab", "a100.x8", "PT1H")   # a queue: the loop's creates are fitted
    ticks = CountingTicks(0.05)
    monkeypatch.setattr(engine.lifecycle, "tick", ticks)
    engine.start()
    assert wait_for(lambda: ticks.began, 5) is not None   # the timer's first tick
    t0, wakes, last = loop_create_cancel(client, 3 * interval)
    time.sleep(interval + 0.5)                             # the wakes' last replan comes
    woken = [t for t in ticks.began[1:] if t >= t0]
    elapsed = woken[-1] - t0 if woken else 0.0
    assert wakes >= 10, wakes
    assert 1 <= len(woken) <= math.ceil(elapsed / interval) + 1, (wakes, len(woken), elapsed)
    assert woken[-1] > last - 0.06 or woken[-1] >= last, "the last wake was served by no tick begun after it"
    for a, b in zip(woken, woken[1:]):
        assert b - a >= interval - 0.02, (a, b)


def test_a_loop_of_changes_to_a_waiting_lease_brings_at_most_one_replan_per_interval(client, runtime, engine,
                                                                                     monkeypatch):
    """A PATCH placed in the plan as it stands (engine/plan_change.py) wakes as a fitted create does."""
    interval = 0.5
    runtime.config.engine_wake_min_interval_seconds = interval
    fill(client)
    create(client, "nlp-lab", "a100.x8", "PT1H")
    lease = create(client, "ml-vision", "a100.x8", "PT1H")
    ticks = CountingTicks(0.05)
    monkeypatch.setattr(engine.lifecycle, "tick", ticks)
    engine.start()
    assert wait_for(lambda: ticks.began, 5) is not None
    t0, changes = time.monotonic(), 0
    while time.monotonic() - t0 < 3 * interval:
        body = {"duration": ("PT2H", "PT1H")[changes % 2], "shrink": True}
        reply = client.patch(f"/v1/leases/{lease['id']}", json=body, headers=headers())
        assert reply.status_code == 200, reply.get_json()
        assert "provisional" in [r["code"] for r in reply.get_json()["lease"]["queue"]["reasons"]]
        changes += 1
    time.sleep(interval + 0.5)
    woken = [t for t in ticks.began[1:] if t >= t0]
    elapsed = woken[-1] - t0 if woken else 0.0
    assert changes >= 5, changes
    assert 1 <= len(woken) <= math.ceil(elapsed / interval) + 1, (changes, len(woken), elapsed)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_wakes_that_can_wait_are_spaced_and_none_is_lost(client, runtime, engine, monkeypatch, seed):
    """Seeded: wakes that can wait (API creates and cancels) at random moments, beside wakes that
    cannot (any other change) and ticks of random length. Every tick a wake that could wait
    brought begins at least the interval after the tick before it; every wake is followed by a tick
    begun after it, within the interval (and the tick under way) for one that could wait, at once
    for one that could not."""
    rng = random.Random(seed)
    interval = 0.3
    runtime.config.engine_wake_min_interval_seconds = interval
    ticks = CountingTicks(0.0)
    lengths = iter([rng.uniform(0, 0.2) for _ in range(10_000)])

    def tick() -> bool:
        ticks()
        time.sleep(next(lengths))
        return False
    monkeypatch.setattr(engine.lifecycle, "tick", tick)
    engine.start()
    assert wait_for(lambda: ticks.began, 5) is not None
    sent: list[tuple[float, bool]] = []
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        can_wait = rng.random() < 0.9
        sent.append((time.monotonic(), can_wait))
        engine.wake(can_wait)
        time.sleep(rng.uniform(0, 0.05))
    time.sleep(interval + 0.5)
    began = list(ticks.began)
    for at, can_wait in sent:
        after = [t for t in began if t > at]
        assert after, f"seed {seed}: a wake at {at} brought no tick"
        # a tick under way when it came (at most 0.2 s) and the scheduler's latency
        assert after[0] - at <= (interval if can_wait else 0) + 0.2 + 0.15, (seed, at, after[0], can_wait)
    urgent = [at for at, can_wait in sent if not can_wait]
    for a, b in zip(began, began[1:]):
        # spaced, unless a wake that could not wait came in between
        if not any(a - 0.01 <= at <= b for at in urgent):
            assert b - a >= interval - 0.02, (seed, a, b)
    assert engine._asked == engine._served


def test_a_waiting_lease_cancelled_lets_the_lease_behind_it_start_within_the_interval(client, runtime, engine):
    """The cancel is taken out of the plan (no replan under the lock); only the engine's replan
    sees that the lease behind it now fits before it: that replan waits at most the interval."""
    interval = 1.0
    runtime.config.engine_wake_min_interval_seconds = interval
    fill(client)
    ahead = create(client, "ml-vision", "a100.x8", "PT2H")   # the host whose 4 GPUs come free in an hour
    behind = create(client, "ml-vision", "a100.x4", "PT2H")  # fits now on the 4 free GPUs, but for `ahead`
    assert ahead["status"] == behind["status"] == "queued"
    engine.start()
    assert wait_for(lambda: status(runtime, behind["id"]) == "queued" and engine._began is not None, 5)
    time.sleep(0.1)
    assert client.delete(f"/v1/leases/{ahead['id']}", headers=headers()).status_code == 204
    took = wait_for(lambda: status(runtime, behind["id"]) in ("scheduled", "provisioning"), interval + 5)
    assert took is not None, "the lease behind was not started"
    assert took <= interval + 2.0, took   # the interval, a tick under way and the replan's own time


def test_a_lease_that_can_start_now_is_started_at_once_within_the_interval(client, runtime, engine):
    """A create whose lease starts now replans in full (no fit) and its wake does not wait, however
    recent the last replan and however long the interval."""
    runtime.config.engine_wake_min_interval_seconds = 60
    fill(client)
    engine.start()
    assert wait_for(lambda: engine._began is not None, 5)
    create(client, "ml-vision", "a100.x8", "PT1H")   # fitted: its wake waits for a minute
    now = create(client, "ml-vision", "h100.x1", "PT1H")
    assert now["status"] == "scheduled"
    took = wait_for(lambda: status(runtime, now["id"]) == "provisioning", 10)
    assert took is not None and took < 5, took


def test_a_wake_ticks_at_once_whatever_the_machine_s_time_zone(runtime, monkeypatch):
    """The scheduler keeps UTC; a naive local time handed to it was read as UTC: east of UTC a
    wake set the tick hours ahead (and the timer with it), west of it in the past."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        engine = runtime.engine
        engine.scheduler.start(paused=True)
        engine.scheduler.add_job(lambda: None, "interval", id="tick", seconds=600)
        engine.wake()
        job = engine.scheduler.get_job("tick")
        from datetime import datetime, timezone
        assert abs((job.next_run_time - datetime.now(timezone.utc)).total_seconds()) < 5
        engine.scheduler.shutdown(wait=False)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("bad", [-1, 601, "3", True, float("nan")])
def test_the_interval_is_a_number_of_seconds_from_0_to_600(db_url, bad):
    from gpu_tenancy.config import Config
    with pytest.raises(ValueError, match="engine_wake_min_interval_seconds must be a number of seconds"):
        Config.load(database_url=db_url, engine_wake_min_interval_seconds=bad)
    assert Config.load(database_url=db_url, engine_wake_min_interval_seconds=0).engine_wake_min_interval_seconds == 0

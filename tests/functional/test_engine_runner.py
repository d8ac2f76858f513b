"""The runner ticks on its timer, and while a VM is booting or being deleted it
watches that lease every provisioning_poll_seconds, without replanning (a boot
takes seconds, a tick can be minutes, a replan most of a second)."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.conftest import headers


@pytest.fixture
def runner(runtime):
    runtime.config.engine_tick_seconds = 600
    runtime.config.provisioning_poll_seconds = 0.25
    engine = runtime.engine
    engine.scheduler.start(paused=True)       # the jobs stay put: the test reads their next run
    engine.scheduler.add_job(lambda: None, "interval", id="tick", seconds=600)
    yield engine
    engine.scheduler.shutdown(wait=False)


def next_run_in(runner, job_id: str) -> float | None:
    job = runner.scheduler.get_job(job_id)
    if job is None:
        return None
    return (job.next_run_time - datetime.now(job.next_run_time.tzinfo)).total_seconds()


def test_a_booting_lease_is_watched_closely_and_a_freed_host_brings_a_full_tick(client, runner, runtime,
                                                                                 engine_tick, monkeypatch):
    assert runner.run_once()
    assert next_run_in(runner, "watch") is None        # nothing in flight: only the usual timer
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    runner.run_once()                                   # starts it: the VM is building
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == \
        "provisioning"
    assert 0 < next_run_in(runner, "watch") <= 0.3

    from gpu_tenancy.engine import ledger
    real_planner, replans = ledger.run_planner, []

    def counting(*args, **kwargs):
        replans.append(1)
        return real_planner(*args, **kwargs)
    monkeypatch.setattr(ledger, "run_planner", counting)
    runtime.clock.advance(60)                           # the simulated boot is done
    runner.watch_once()
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "active"
    runner.scheduler.remove_job("watch")
    runner.watch_once()                                 # nothing in flight: no further watch
    assert next_run_in(runner, "watch") is None

    assert replans == []                                # watching replans nothing
    client.delete(f"/v1/leases/{lease['id']}", headers=headers())   # (the API replans)
    replans.clear()
    runner.watch_once()                                 # ending: deleted, GPUs not yet released
    assert 0 < next_run_in(runner, "watch") <= 0.3
    runtime.clock.advance(10)                           # released: a full tick is due at once
    runner.scheduler.modify_job("tick", next_run_time=datetime.now(runner.scheduler.timezone) + timedelta(hours=1))
    runner.watch_once()
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "ended"
    assert next_run_in(runner, "tick") <= 1
    assert replans == []



def test_a_wake_during_a_tick_brings_another_tick_at_once(runtime, monkeypatch):
    """The tick job runs one instance at a time: a wake that comes while it runs
    would be skipped by the scheduler and wait for the next timer tick (here ten
    minutes away). It must bring one more tick as soon as the running one ends."""
    import threading
    import time

    runtime.config.engine_tick_seconds = 600
    engine = runtime.engine
    ticks, second = [], threading.Event()

    def slow_tick():
        ticks.append(time.monotonic())
        if len(ticks) == 1:
            engine.wake()            # as an API request would, mid-tick
            time.sleep(0.5)
        else:
            second.set()
        return False
    monkeypatch.setattr(engine.lifecycle, "tick", slow_tick)
    engine.start()
    try:
        assert second.wait(timeout=10), f"only {len(ticks)} tick(s): the wake was lost"
    finally:
        engine.scheduler.shutdown(wait=True)
    assert len(ticks) == 2 and ticks[1] - ticks[0] < 5


def test_a_watch_never_runs_beside_a_tick(client, runner, runtime, monkeypatch):
    """Both carry booting leases on; side by side they attached one volume twice and the
    second attach, refused by the cloud, failed the lease. A watch that finds a tick
    running leaves the work to it and looks again soon."""
    assert runner.run_once()
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    runner.run_once()
    runtime.clock.advance(60)
    watched = []
    monkeypatch.setattr(runner.lifecycle, "watch", lambda: watched.append(1) or False)
    runner.scheduler.remove_job("watch")
    with runner._tick_lock:                             # a tick is running
        runner.watch_once()
    assert watched == [] and 0 < next_run_in(runner, "watch") <= 0.3
    runner.watch_once()
    assert watched == [1]
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == \
        "provisioning"


def test_a_wake_during_a_watch_brings_a_tick_after_it(client, runner, runtime, monkeypatch):
    assert runner.run_once()
    client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers())
    runner.run_once()

    def watch_woken():
        runner.wake()                                   # the API changed something meanwhile,
        assert runner.run_once()                        # the tick it brings finds the lock taken,
        runner.scheduler.modify_job("tick", next_run_time=datetime.now() + timedelta(seconds=600))
        return False                                    # and the scheduler sets the next one a timer away
    monkeypatch.setattr(runner.lifecycle, "watch", watch_woken)
    runner.watch_once()
    assert next_run_in(runner, "tick") <= 0.1           # the tick comes right after the watch


def engine_holder(runtime) -> str | None:
    from sqlalchemy import select

    from gpu_tenancy.db.models import Lock
    with runtime.sessions() as session:
        return session.scalars(select(Lock.holder).where(Lock.name == "engine")).one()


@pytest.mark.parametrize("takes", [0.05, 0.3, 0.6, None])   # a pass's length; None: it never ends by itself
def test_a_stop_ends_within_its_bound_whatever_the_pass_is_doing(runtime, monkeypatch, takes):
    """A pass that ends within the bound: the stop waits for it and steps down. One that does not
    (a cloud call that never answers): the stop says so at its bound and keeps the leadership, the
    pass being still able to act; the caller exits without it. Wakes meanwhile (API requests still
    answered) start no further pass once the stop is asked."""
    import random
    import threading
    import time

    rnd = random.Random(str(takes))
    runtime.config.engine_tick_seconds = 600
    engine, release = runtime.engine, threading.Event()
    passes, within = [], 1.0

    def tick():
        passes.append(time.monotonic())
        engine.wake()                                     # as API requests would, all along
        release.wait(takes if takes is not None else 30)
        return False
    monkeypatch.setattr(engine.lifecycle, "tick", tick)
    engine.start()
    try:
        while not passes:
            time.sleep(0.01)
        time.sleep(rnd.uniform(0, 0.2))                   # the stop comes at some moment of the pass
        asked = time.monotonic()
        ended = engine.stop(within=within)
        took = time.monotonic() - asked
    finally:
        release.set()                                     # the stalled pass ends with the test
    if takes is None:
        assert not ended and within <= took < within + 0.5
        assert engine_holder(runtime) == engine.holder    # kept: the pass may still act
    else:
        assert ended and took < within, took
        assert engine_holder(runtime) is None             # stepped down: the standby may lead at once
    time.sleep(0.1)
    assert max(passes) < asked                            # woken all along, yet no pass began after the stop

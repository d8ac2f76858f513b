"""Lease notifications on the message bus: Blazar's event types and payload, and
gpu-tenancy's own, written in the transaction of the change (so none is lost), sent
by the outbox after, in order, and retried while the bus refuses them; none is
written unless the operator turned them on."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import event, select

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.engine import notifications as n
from tests.conftest import headers
from tests.functional.test_create_statements import fitted
from tests.functional.test_plan_insert import fill

BLAZAR_KEYS = {"lease_id", "user_id", "project_id", "trust_id", "start_date", "end_date", "status", "reservations",
               "events", "name", "created_at", "updated_at", "degraded"}
VISION, NLP = headers("ml-vision"), headers("nlp-lab")


class Bus:
    """Stands for the broker: keeps what it took; refuses while `down`."""

    def __init__(self):
        self.taken: list[dict] = []
        self.down = False
        self.tries = 0

    def __call__(self, envelope: dict) -> None:
        self.tries += 1
        if self.down:
            raise ConnectionRefusedError("the broker is down")
        self.taken.append(envelope)

    def of(self, lease_id: str) -> list[str]:
        return [e["event_type"] for e in self.taken if e["payload"]["lease_id"] == lease_id]


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       notifications_transport_url="fake://", warn_before_end_seconds=600)


@pytest.fixture
def bus(runtime):
    made, bus = runtime.engine.outbox.bus, Bus()
    made.close()   # the fake:// transport the outbox made from the configuration
    runtime.engine.outbox.bus = bus
    return bus


@pytest.fixture
def tick(engine_tick, runtime, bus):
    def tick(advance: int = 0):
        engine_tick(advance)
        runtime.engine.outbox.run_once()
        assert runtime.engine.outbox.wait(30)
    return tick


def ask(client, who=VISION, **body):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", **body}, headers=who)
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def test_a_lease_from_ask_to_end_sends_blazars_notifications_in_order(client, runtime, bus, tick):
    lease = ask(client)
    tick()
    tick(advance=30)
    reply = client.patch(f"/v1/leases/{lease['id']}", json={"duration": "PT2H"}, headers=VISION)
    assert reply.status_code == 200, reply.get_json()
    tick(advance=2 * 3600 - 600)      # the before-end warning
    tick(advance=600)                 # the end
    tick(advance=30)
    assert bus.of(lease["id"]) == [n.CREATE, n.QUEUED, n.START_LEASE, n.UPDATE, n.BEFORE_END_LEASE, n.END_LEASE]
    by_type = {e["event_type"]: e for e in bus.taken}
    create, start, end = by_type[n.CREATE], by_type[n.START_LEASE], by_type[n.END_LEASE]
    assert BLAZAR_KEYS <= set(create["payload"])
    assert create["priority"] == "INFO" and create["publisher_id"] == "gpu-tenancy.lease"
    assert (create["payload"]["project_id"], create["payload"]["user_id"]) == ("ml-vision", "ml-vision-user")
    assert create["payload"]["status"] == "PENDING" and start["payload"]["status"] == "ACTIVE"
    # each notice is the lease in the state it announces: the create's is the asked lease, not the queued one
    assert create["payload"]["state"] == "requested" and by_type[n.QUEUED]["payload"]["state"] == "queued"
    assert end["payload"]["status"] == "TERMINATED" and end["payload"]["state"] == "ended"
    [reservation] = start["payload"]["reservations"]
    assert reservation["resource_type"] == "flavor:instance" and reservation["amount"] == 1
    assert start["payload"]["gpus"] == 1 and start["payload"]["gpu_model"] == "A100"
    # Blazar's date format, and the extension seen in the end date
    assert end["payload"]["end_date"].endswith(".000000") and "T" in end["payload"]["end_date"]
    assert by_type[n.UPDATE]["payload"]["end_date"] == end["payload"]["end_date"]
    assert len({e["message_id"] for e in bus.taken}) == len(bus.taken)
    with runtime.sessions() as s:
        assert {row.status for row in s.scalars(select(m.BusNotice))} == {"sent"}


def test_a_cancelled_lease_sends_delete_and_a_failed_one_its_class(client, runtime, cloud, bus, tick):
    waiting = ask(client, start="2026-12-30T00:00:00Z")
    assert client.delete(f"/v1/leases/{waiting['id']}", headers=VISION).status_code == 204
    cloud.inject_failure("server_error", F.IMAGE)   # the user's to fix: fails at once
    doomed = ask(client)
    for _ in range(4):
        tick(advance=30)
    assert bus.of(waiting["id"]) == [n.CREATE, n.QUEUED, n.DELETE]
    delete = [e for e in bus.taken if e["event_type"] == n.DELETE][0]
    assert delete["payload"]["status"] == "TERMINATED" and delete["payload"]["state"] == "cancelled"
    assert bus.of(doomed["id"]) == [n.CREATE, n.QUEUED, n.END_LEASE, n.FAILED] or \
        bus.of(doomed["id"]) == [n.CREATE, n.QUEUED, n.FAILED]
    failed = [e for e in bus.taken if e["event_type"] == n.FAILED][0]["payload"]
    assert failed["failure_class"] == "image" and failed["status"] == "ERROR" and failed["failure_message"]


def test_a_preempted_lease_sends_its_end_and_preempted(client, bus, tick):
    pre = ask(client, NLP, shape="a100.x8", instances=4, duration="PT8H", priority_class="preemptible")
    tick()
    tick(advance=5 * 60)
    ask(client, VISION, shape="a100.x8", duration="PT2H")
    tick()
    tick(advance=15 * 60)
    tick(advance=5)
    assert bus.of(pre["id"])[-2:] == [n.END_LEASE, n.PREEMPTED]
    preempted = [e for e in bus.taken if e["event_type"] == n.PREEMPTED][0]["payload"]
    assert preempted["early_end_kind"] == "preempted" and preempted["for_lease"] and preempted["state"] == "preempted"


def test_a_started_lease_moved_off_a_down_host_then_cancelled_sends_its_end(client, runtime, cloud, bus, tick):
    """Billing opened it on start_lease: it must see an end_lease whatever final state the lease
    reaches, here cancelled while waiting for the GPUs it was moved to (its VMs are gone)."""
    moved = ask(client, shape="a100.x8", duration="PT4H")
    for who, duration in ((VISION, "PT4H"), (NLP, "PT1H"), (NLP, "PT4H")):   # every 8-GPU host taken
        ask(client, who, shape="a100.x8", duration=duration)
    tick()
    tick(advance=30)
    shown = client.get(f"/v1/leases/{moved['id']}", headers=VISION).get_json()["lease"]
    assert shown["status"] == "active"
    cloud.set_host_state(shown["servers"][0]["host"], up=False)
    tick(advance=runtime.config.host_refresh_seconds)
    assert client.get(f"/v1/leases/{moved['id']}", headers=VISION).get_json()["lease"]["status"] == "scheduled"
    assert client.delete(f"/v1/leases/{moved['id']}", headers=VISION).status_code == 204
    tick(advance=30)
    sent = bus.of(moved["id"])
    assert sent.count(n.START_LEASE) == 1 and sent.count(n.END_LEASE) == 1, sent
    assert sent.index(n.END_LEASE) > sent.index(n.START_LEASE)


def test_a_refused_send_is_retried_with_backoff_and_holds_back_the_later_ones(client, runtime, bus, tick):
    bus.down = True
    first = ask(client)
    tick()
    tries = bus.tries
    assert bus.taken == [] and tries == 1        # stopped at the first refusal: the rest wait, in order
    tick()
    assert bus.tries == tries                    # not again before its backoff
    second = ask(client)
    bus.down = False
    tick(advance=5)
    events = [(e["payload"]["lease_id"], e["event_type"]) for e in bus.taken]
    assert events[:2] == [(first["id"], n.CREATE), (first["id"], n.QUEUED)]
    assert {(second["id"], n.CREATE), (second["id"], n.QUEUED)} <= set(events)
    with runtime.sessions() as s:
        rows = s.scalars(select(m.BusNotice).order_by(m.BusNotice.id)).all()
    assert [(r.lease_id, r.event_type) for r in rows] == events      # all sent, in the order they were written
    assert {r.status for r in rows} == {"sent"}
    assert rows[0].attempts == 2 and "broker is down" in rows[0].last_error


def test_a_send_whose_result_could_not_be_recorded_is_tried_again_after_a_backoff(
        client, runtime, bus, monkeypatch):
    """Defect 2 (its bus twin). The broker refused the notice, and writing that down failed too
    (the database away a moment). Before: the notice stayed due as it was, and every pass of
    the outbox (each engine tick) sent it again at once, for as long as the writes failed. Now
    the bus thread waits a doubling backoff, as after a refusal it recorded."""
    def record_failure(*args, **kwargs):
        raise RuntimeError("the database went away")
    monkeypatch.setattr(n, "record_failure", record_failure)
    outbox = runtime.engine.outbox
    bus.down = True
    ask(client)
    assert runtime.engine.run_once()   # the leader: its outbox sends
    at = []
    for _ in range(20):
        before = bus.tries
        outbox.run_once()
        assert outbox.wait(30)
        at += [runtime.clock.now()] * (bus.tries - before)
        runtime.clock.advance(1)
    assert [b - a for a, b in zip(at, at[1:])] == [1, 2, 4, 8], at   # not one a pass
    monkeypatch.undo()
    bus.down = False
    runtime.clock.advance(16)
    outbox.run_once()
    assert outbox.wait(30)
    assert [e["event_type"] for e in bus.taken] == [n.CREATE, n.QUEUED]


def test_a_crash_between_send_and_record_sends_it_again_with_the_same_message_id(client, runtime, clock, config):
    ask(client)
    taken = []

    def crash_after_send(envelope):
        taken.append(envelope)
        raise SystemExit("killed after the broker took it")   # not an Exception: nothing records it
    with pytest.raises(SystemExit):
        n.send_due(runtime.sessions, clock, config, crash_after_send)
    n.send_due(runtime.sessions, clock, config, taken.append)
    assert [e["event_type"] for e in taken] == [n.CREATE, n.CREATE, n.QUEUED]
    assert taken[0]["message_id"] == taken[1]["message_id"] and taken[0]["payload"] == taken[1]["payload"]


def test_off_unless_a_transport_url_is_set(db_url, clock, cloud):
    from gpu_tenancy.app import create_app
    app = create_app(Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True),
                     clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    from gpu_tenancy.db.session import session_scope
    from gpu_tenancy.demo.seed import seed
    with session_scope(runtime.sessions) as session:
        seed(session, clock.now(), cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    ask(app.test_client())
    runtime.engine.run_once()
    assert not runtime.engine.outbox.bus_on
    with runtime.sessions() as s:
        assert s.scalars(select(m.BusNotice)).all() == []
    runtime.sessions.kw["bind"].dispose()


def test_the_real_oslo_transport_takes_them(client, runtime, tick):
    """fake:// is oslo.messaging's in-process driver: the sender's own calls, without a broker
    (tests/integration/test_bus_notifications_on_openstack.py consumes them from RabbitMQ)."""
    runtime.engine.outbox.bus = n.BusSender(runtime.config)    # as the outbox makes it from the configuration
    lease = ask(client)
    try:
        tick()
    finally:
        runtime.engine.outbox.stop()          # closes the transport (its threads would outlive the test)
    assert runtime.engine.outbox.wait(30)
    with runtime.sessions() as s:
        rows = s.scalars(select(m.BusNotice).where(m.BusNotice.lease_id == lease["id"])).all()
    assert [(r.event_type, r.status) for r in rows] == [(n.CREATE, "sent"), (n.QUEUED, "sent")]
    assert json.loads(rows[0].payload)["lease_id"] == lease["id"]


@pytest.mark.parametrize("step", ["active_seen", "delete_requested"])
def test_kill_9_of_the_engine_loses_no_notification(tmp_path, db_url, step):
    """The engine is killed with SIGKILL as the lease starts (or ends), another takes over:
    every notification of the lease was sent, each once, in order (fake:// is oslo.messaging's
    in-process transport, in the engine processes)."""
    from pathlib import Path

    import yaml

    from gpu_tenancy.app import create_app
    from gpu_tenancy.clock import SystemClock
    from gpu_tenancy.cloud.simulated import SimulatedCloud
    from gpu_tenancy.config import DEMO_CLOUD
    from gpu_tenancy.db.session import session_scope
    from gpu_tenancy.demo.seed import seed
    from tests.crash_harness import crash_then_restart, write_config

    cloud_config = yaml.safe_load(Path(DEMO_CLOUD).read_text())
    cloud_config.update(boot_seconds=1, delete_seconds=1, state_file=str(tmp_path / "cloud.json"))
    (tmp_path / "cloud.yaml").write_text(yaml.safe_dump(cloud_config))
    config_path = write_config(tmp_path, database_url=db_url, auth_strategy="noauth2", cloud_driver="simulated",
                               simulated_cloud=str(tmp_path / "cloud.yaml"), notifications_transport_url="fake://")
    clock = SystemClock()
    cloud = SimulatedCloud.from_file(tmp_path / "cloud.yaml", clock)
    app = create_app(Config.load(str(config_path)), clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    try:
        with session_scope(runtime.sessions) as session:
            seed(session, clock.now(), cloud.images())
        runtime.engine.lifecycle.refresh_hosts()
        lease = ask(app.test_client(), duration="PT6S")
        outcome = crash_then_restart(tmp_path, config_path, runtime.sessions, lease["id"], step)
        assert outcome.killed and outcome.final_status == "ended", outcome.engine_logs
        import time
        deadline = time.monotonic() + 30   # the second engine was stopped once the lease ended: send the rest
        while time.monotonic() < deadline and n.send_due(runtime.sessions, clock, runtime.config, lambda e: None):
            pass
        with runtime.sessions() as s:
            rows = s.scalars(select(m.BusNotice).where(m.BusNotice.lease_id == lease["id"])
                             .order_by(m.BusNotice.id)).all()
        kinds = [r.event_type for r in rows]
        if n.BEFORE_END_LEASE in kinds:   # the warning's lead is 0 here: it may come at the end's tick
            assert kinds.index(n.BEFORE_END_LEASE) == 3
            kinds.remove(n.BEFORE_END_LEASE)
        assert kinds == [n.CREATE, n.QUEUED, n.START_LEASE, n.END_LEASE]
        assert {r.status for r in rows} == {"sent"}
    finally:
        runtime.engine.outbox.stop()
        runtime.sessions.kw["bind"].dispose()


@pytest.mark.parametrize("step", __import__("gpu_tenancy.engine.crashpoints", fromlist=["STEPS"]).STEPS)
def test_a_crash_at_each_step_loses_and_repeats_no_notification(client, runtime, cloud, bus, monkeypatch, step):
    """The engine dies at each step of starting and ending a lease (the transaction in flight
    rolled back), a fresh one takes over: the lease's notices are each there once, in order."""
    from gpu_tenancy.engine import lease_flavor, lifecycle as lifecycle_module
    from gpu_tenancy.engine.lifecycle import Lifecycle
    from gpu_tenancy.engine.runner import EngineRunner

    class Killed(BaseException):
        pass
    crashed = []

    def crash_point(name):
        if name == step and not crashed:
            crashed.append(name)
            raise Killed(name)
    monkeypatch.setattr(lifecycle_module, "crash_point", crash_point)
    monkeypatch.setattr(lease_flavor, "crash_point", crash_point)
    lease = ask(client, shape="a100.x4", instances=2, duration=120, volume={"size_gb": 10})
    engine = runtime.engine
    for _ in range(12):
        try:
            engine.run_once()
        except Killed:
            engine = EngineRunner(Lifecycle(runtime.sessions, cloud, runtime.clock, runtime.config))
            engine.outbox.bus = bus
        engine.leading = True
        engine.outbox.run_once()
        assert engine.outbox.wait(30)
        runtime.clock.advance(20)
    assert crashed == [step]
    kinds = [k for k in bus.of(lease["id"]) if k != n.BEFORE_END_LEASE]
    assert kinds == [n.CREATE, n.QUEUED, n.START_LEASE, n.END_LEASE]


def test_a_fitted_create_sends_its_notices_too(client, runtime, bus, tick):
    """A create fitted into the plan (its writes and its commit sent at once on PostgreSQL:
    engine/lease_insert.py: commit_fitted) writes its notices in its transaction all the same,
    before it takes the ledger lock."""
    runtime.fits.min_waiting = 0
    fill(client)   # the demo cloud's A100 all taken: the next lease waits, fitted into the plan
    before = fitted(client)
    engine, sent = runtime.sessions.kw["bind"], []

    def statement(conn, cursor, text, *args):
        sent.append(" ".join(text.split()))

    def commit(conn):
        sent.append("COMMIT")
    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", commit)
    try:
        lease = ask(client)
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", commit)
    assert fitted(client) == before + 1
    # the notices written before the lease's transaction ends: on PostgreSQL the audit record's
    # INSERT (with the lease's UPDATE in its WITH) is sent with the COMMIT, its own
    # (on PostgreSQL the lease's INSERT is in the WITH of its events')
    made = next(k for k, s in enumerate(sent) if "INSERT INTO leases" in s)
    ends = next(k for k, s in enumerate(sent) if k > made and (
        s == "COMMIT" or engine.dialect.name == "postgresql" and "INSERT INTO audit_records" in s))
    notices = [k for k, s in enumerate(sent) if s.startswith("INSERT INTO bus_notices")]
    assert notices and all(made < k < ends for k in notices), sent
    # and before the ledger lock is taken (by the claim): no round trip of theirs under it
    claim = next(k for k, s in enumerate(sent) if s.startswith("UPDATE locks SET inserted"))
    assert all(k < claim for k in notices), sent
    assert lease["status"] == "queued" and lease["queue"]["position"] == 1
    tick()
    assert bus.of(lease["id"]) == [n.CREATE, n.QUEUED]

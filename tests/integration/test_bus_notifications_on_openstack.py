"""Lease notifications consumed from the loopback cloud's real RabbitMQ with an
oslo.messaging notification listener, as CloudKitty, Ceilometer or Warre would.

The leases run on the simulated cloud (this test takes no GPU of the shared one);
the notices go to an exchange and topic of the test's own, so the cloud's services
see none of them."""
from __future__ import annotations

import threading
import time
import uuid

import oslo_messaging
import pytest
from oslo_config import cfg

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.demo.seed import seed
from gpu_tenancy.engine import notifications as n
from tests.conftest import T0, headers




class Heard:
    """The listener's endpoint: every notification it is given, as (event type, payload, publisher)."""

    def __init__(self):
        self.got: list[tuple[str, dict, str]] = []
        self.lock = threading.Condition()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        with self.lock:
            self.got.append((event_type, payload, publisher_id))
            self.lock.notify_all()
        return oslo_messaging.NotificationResult.HANDLED

    def wait_for(self, count: int, timeout: float = 60) -> list[tuple[str, dict, str]]:
        with self.lock:
            self.lock.wait_for(lambda: len(self.got) >= count, timeout)
            return list(self.got)


@pytest.fixture
def channel(bus_url):
    """A listener bound to an exchange and topic of this test's own, before anything is sent
    (a notice sent to an exchange no queue is bound to is dropped by the broker)."""
    name = f"gpu-tenancy-test-{uuid.uuid4().hex[:8]}"
    conf = cfg.ConfigOpts()
    conf([], project="gpu-tenancy-test", default_config_files=[], default_config_dirs=[])
    transport = oslo_messaging.get_notification_transport(conf, url=bus_url)
    heard = Heard()
    listener = oslo_messaging.get_notification_listener(
        transport, [oslo_messaging.Target(topic=name, exchange=name)], [heard], executor="threading")
    listener.start()
    yield name, heard
    listener.stop()
    listener.wait()
    transport.cleanup()


def test_a_leases_notifications_are_consumed_from_rabbitmq(bus_url, channel, db_url):
    name, heard = channel
    clock = VirtualClock(T0)
    cloud = SimulatedCloud.from_file(DEMO_CLOUD, clock)
    config = Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, warn_before_end_seconds=600,
                         notifications_transport_url=bus_url, notifications_topic=name,
                         notifications_exchange=name, notifications_publisher_id="gpu-tenancy.test")
    app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    outbox = runtime.engine.outbox
    try:
        with session_scope(runtime.sessions) as session:
            seed(session, clock.now(), cloud.images())
        runtime.engine.lifecycle.refresh_hosts()
        client = app.test_client()
        lease = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H"},
                            headers=headers()).get_json()["lease"]

        def tick(advance: int = 0):
            clock.advance(advance)
            runtime.engine.run_once()
            outbox.run_once()
            assert outbox.wait(60)
        tick()
        tick(advance=30)
        tick(advance=3600 - 600)
        tick(advance=600)
        tick(advance=30)
        expected = [n.CREATE, n.QUEUED, n.START_LEASE, n.BEFORE_END_LEASE, n.END_LEASE]
        got = heard.wait_for(len(expected))
        assert [event for event, _, _ in got] == expected
        assert {publisher for _, _, publisher in got} == {"gpu-tenancy.test"}
        for _event, payload, _ in got:
            assert payload["lease_id"] == lease["id"] and payload["project_id"] == "ml-vision"
            assert payload["reservations"][0]["resource_type"] == "flavor:instance"
        assert got[-1][1]["status"] == "TERMINATED" and got[2][1]["gpus"] == 2
        time.sleep(1)
        assert len(heard.got) == len(expected)   # each once
    finally:
        outbox.stop()
        runtime.sessions.kw["bind"].dispose()

"""An offer taken that replaces a waiting lease cancels that lease: on the message bus as
a cancel is (lease.delete), so that billing and Blazar-speaking consumers close it."""
from __future__ import annotations

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.engine import notifications as n
from tests.conftest import headers
from tests.functional.test_bus_notifications import Bus
from tests.functional.test_offers import ASK, cloud, full  # noqa: F401  (the offers' cloud and its full hosts)


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       gpu_memory_gb={"A100": 80, "H100": 80}, notifications_transport_url="fake://")


@pytest.fixture
def bus(runtime):
    runtime.engine.outbox.bus.close()   # the fake:// transport the outbox made from the configuration
    runtime.engine.outbox.bus = Bus()
    return runtime.engine.outbox.bus


def sent(runtime, bus, lease_id: str) -> list[str]:
    runtime.engine.outbox.run_once()
    assert runtime.engine.outbox.wait(30)
    return bus.of(lease_id)


def test_the_lease_an_offer_replaces_sends_lease_delete_as_a_cancel_does(client, runtime, bus, full):
    reply = client.post("/v1/leases", json=ASK, headers=headers()).get_json()
    waiting, offers = reply["lease"], reply["offers"]
    assert waiting["status"] == "queued" and offers, reply
    taken = client.post("/v1/leases", json={**ASK, "accept_offer": offers[0]["id"]}, headers=headers())
    assert taken.status_code == 201, taken.get_json()
    assert client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]["status"] == "cancelled"
    assert sent(runtime, bus, waiting["id"]) == [n.CREATE, n.QUEUED, n.DELETE]

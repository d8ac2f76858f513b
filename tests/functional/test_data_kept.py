"""No path a lease can take deletes the tenant's data volume: its end, a cancel, a
failure, a host failure, an engine crash. (Preemption is not on this branch.)
Each test uses a volume the tenant had before the lease and checks it is still
there, detached and whole, at the end."""
from __future__ import annotations

import pytest

from gpu_tenancy.domain.failures import FailureClass
from gpu_tenancy.engine import lifecycle as lifecycle_module
from gpu_tenancy.engine.lifecycle import Lifecycle
from gpu_tenancy.engine.runner import EngineRunner
from tests.conftest import headers


@pytest.fixture
def volume(cloud):
    return cloud.add_volume("ml-vision", 200, "my-dataset")


def ask(client, volume, **body):
    reply = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT2H", "volume": {"id": volume},
                                            **body}, headers=headers())
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def status(client, lease):
    return client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"]


def run_active(client, lease, engine_tick):
    engine_tick()
    engine_tick(advance=30)
    assert status(client, lease) == "active"


def assert_kept(cloud, volume):
    kept = cloud.volumes()[volume]
    assert (kept["status"], kept["size_gb"], kept["name"], kept["project_id"]) == (
        "available", 200, "my-dataset", "ml-vision")


def test_the_end_of_a_lease_keeps_the_volume(client, cloud, volume, engine_tick):
    lease = ask(client, volume)
    run_active(client, lease, engine_tick)
    assert cloud.volumes()[volume]["status"] == "in-use"
    engine_tick(advance=2 * 3600)
    engine_tick(advance=10)
    assert status(client, lease) == "ended"
    assert_kept(cloud, volume)


@pytest.mark.parametrize("when", ["scheduled", "active"])
def test_a_cancel_keeps_the_volume(client, cloud, volume, engine_tick, when):
    lease = ask(client, volume)
    if when == "active":
        run_active(client, lease, engine_tick)
    assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code == 204
    engine_tick()
    engine_tick(advance=10)
    assert status(client, lease) in ("cancelled", "ended")
    assert_kept(cloud, volume)


def test_a_failure_keeps_the_volume(client, cloud, volume, engine_tick):
    cloud.inject_failure("server_error", FailureClass.IMAGE)
    lease = ask(client, volume)
    engine_tick()
    engine_tick(advance=30)
    engine_tick(advance=10)
    assert status(client, lease) == "failed"
    assert_kept(cloud, volume)


def test_a_host_failure_keeps_the_volume(client, runtime, cloud, volume, engine_tick):
    lease = ask(client, volume)
    run_active(client, lease, engine_tick)
    host = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["servers"][0]["host"]
    cloud.set_host_state(host, up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    assert cloud.volumes()[volume]["status"] == "available"     # detached from the lost VM, not deleted
    engine_tick(advance=30)
    assert status(client, lease) == "active" and cloud.volumes()[volume]["status"] == "in-use"
    client.delete(f"/v1/leases/{lease['id']}", headers=headers())
    engine_tick()
    engine_tick(advance=10)
    assert status(client, lease) == "ended"
    assert_kept(cloud, volume)


class Killed(BaseException):
    pass


@pytest.mark.parametrize("step", ["boot_requested", "delete_requested"])
def test_an_engine_crash_keeps_the_volume(client, runtime, cloud, volume, monkeypatch, step):
    lease = ask(client, volume, duration=120)

    def crash_point(name):
        if name == step:
            monkeypatch.undo()
            raise Killed(name)
    monkeypatch.setattr(lifecycle_module, "crash_point", crash_point)
    engine = runtime.engine
    for _ in range(12):
        try:
            engine.run_once()
        except Killed:
            engine = EngineRunner(Lifecycle(runtime.sessions, cloud, runtime.clock, runtime.config))
        runtime.clock.advance(20)
    assert status(client, lease) == "ended"
    assert_kept(cloud, volume)

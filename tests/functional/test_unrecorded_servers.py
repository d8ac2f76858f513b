"""A server the cloud made but the engine never recorded (a boot whose answer was lost after
Nova made it, or the engine stopped just after asking) is deleted when the lease is placed
again, and its GPUs are held till released; the next attempt boots its own server on its new
host rather than taking that one over on the old host, whose GPUs the ledger gives to others."""
from __future__ import annotations

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.engine import lease_flavor, lifecycle as lifecycle_module
from gpu_tenancy.engine.lifecycle import Lifecycle
from tests.conftest import headers

WHOLE_HOST = {"shape": "a100.x8", "duration": "PT2H"}


def show(client, lease_id, project="ml-vision"):
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]


def live(cloud) -> dict:
    """The cloud's servers not deleted, by id: (lease, host)."""
    return {sid: (v["lease_id"], v["host"]) for sid, v in cloud.servers().items() if v["status"] != "DELETED"}


def test_a_boot_whose_answer_was_lost_leaves_no_server_on_the_old_host(client, runtime, cloud, engine_tick,
                                                                      monkeypatch):
    real_boot = cloud.boot
    lost: list[str] = []

    def boot(request):
        server_id = real_boot(request)   # Nova made the server...
        if not lost:
            lost.append(server_id)       # ...and its answer never came (a read timeout)
            raise CloudError(F.API_ERROR, f"asking Nova for VM {request.vm_index} failed", "Read timed out")
        return server_id
    monkeypatch.setattr(cloud, "boot", boot)
    lease = client.post("/v1/leases", json=WHOLE_HOST, headers=headers()).get_json()["lease"]
    first_host = lease["allocations"][0]["host"]
    engine_tick()
    shown = show(client, lease["id"])
    assert shown["status"] == "scheduled" and shown["failures"][0]["action"] == "retried", shown
    assert shown["allocations"][0]["host"] != first_host
    assert lost[0] not in live(cloud)   # deleted with the attempt, though never recorded
    engine_tick(advance=runtime.config.retry_backoff_seconds)
    engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert shown["status"] == "active"
    [(server_id, (owner, host))] = [(s, v) for s, v in live(cloud).items() if v[0] == lease["id"]]
    assert server_id != lost[0] and host == shown["allocations"][0]["host"] != first_host
    # the old host's GPUs go to the next leases, which boot there
    others = [client.post("/v1/leases", json={**WHOLE_HOST, "duration": "PT1H"}, headers=headers("nlp-lab"))
              .get_json()["lease"] for _ in range(3)]
    assert any(o["allocations"] and o["allocations"][0]["host"] == first_host for o in others)
    engine_tick()
    engine_tick(advance=30)
    assert all(not show(client, o["id"], "nlp-lab")["failures"] for o in others)


class Stopped(BaseException):
    """The engine's process stopping at a crash point."""


def test_a_server_asked_for_just_before_the_engine_stopped_is_deleted_when_its_host_goes_down(client, runtime,
                                                                                              cloud, monkeypatch):
    lease = client.post("/v1/leases", json=WHOLE_HOST, headers=headers()).get_json()["lease"]
    first_host = lease["allocations"][0]["host"]

    def crash_point(name):
        if name == "boot_requested":
            raise Stopped(name)
    monkeypatch.setattr(lifecycle_module, "crash_point", crash_point)
    monkeypatch.setattr(lease_flavor, "crash_point", crash_point)
    try:
        runtime.engine.run_once()
    except Stopped:
        pass
    [orphan] = live(cloud)
    monkeypatch.undo()
    cloud.set_host_state(first_host, up=False)   # while the engine is stopped
    engine = Lifecycle(runtime.sessions, cloud, runtime.clock, runtime.config)   # its next process
    engine.tick()
    shown = show(client, lease["id"])
    assert shown["failures"] and shown["failures"][0]["class"] == "host_down"
    assert orphan not in live(cloud)
    for _ in range(4):
        runtime.clock.advance(30)
        engine.tick()
    shown = show(client, lease["id"])
    assert shown["status"] == "active" and shown["allocations"][0]["host"] != first_host
    assert [host for owner, host in live(cloud).values() if owner == lease["id"]] == [shown["allocations"][0]["host"]]

"""The per-project flavors of the first wave (gt-<shape>-<project>, which gave the
project a way to the GPUs around the queue) are removed by the engine's reconcile,
whatever their shape; a lease's own flavor lives and goes with the lease."""
from __future__ import annotations

from gpu_tenancy.cloud.driver import ShapeSpec
from tests.conftest import headers

A100_X1 = ShapeSpec("a100.x1", "A100", 1, 8, 65536, 100, "a100")


def test_first_wave_flavors_are_removed_and_a_lease_flavor_is_kept_while_its_lease_runs(client, cloud, runtime,
                                                                                         engine_tick):
    legacy = [cloud.add_legacy_flavor(project, A100_X1) for project in ("ml-vision", "nlp-lab")]
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=60)
    shown = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] == "active"
    engine_tick(advance=runtime.config.host_refresh_seconds)   # reconcile runs
    assert list(cloud.flavors()) == [shown["flavor"]["id"]]
    assert not set(legacy) & set(cloud.flavors())
    assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code == 204
    for _ in range(3):
        engine_tick(advance=60)
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "ended"
    assert cloud.flavors() == {}

"""A project's private flavor goes when its shape is retired and no unfinished
lease of the project still uses it (the engine's reconcile removes it)."""
from __future__ import annotations

from tests.conftest import headers

ADMIN = headers("admin", "admin")


def flavors_of(cloud, shape):
    return [f for f in cloud.flavors().values() if f["shape"] == shape]


def test_the_flavor_stays_while_a_lease_uses_it_and_goes_after(client, cloud, engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=60)
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "active"
    assert len(flavors_of(cloud, "a100.x1")) == 1
    assert client.delete("/v1/shapes/a100.x1", headers=ADMIN).status_code in (200, 204)

    engine_tick(advance=120)                 # reconcile runs: the lease still uses the flavor
    assert len(flavors_of(cloud, "a100.x1")) == 1
    assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code == 204
    for _ in range(3):
        engine_tick(advance=60)
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "ended"
    engine_tick(advance=120)
    assert flavors_of(cloud, "a100.x1") == []


def test_flavors_of_shapes_still_offered_are_kept(client, cloud, engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=60)
    client.delete(f"/v1/leases/{lease['id']}", headers=headers())
    for _ in range(4):
        engine_tick(advance=120)
    assert len(flavors_of(cloud, "a100.x2")) == 1

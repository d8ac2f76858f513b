"""No GPU is booked twice at the edges of a lease: where one ends and the next begins.

Each test drives the demo's API and engine with the simulated cloud (boot 20 s,
delete 5 s) and the virtual clock, and checks that no lease is refused a host by
the cloud (no_valid_host), which is what a double booking looks like from the cloud."""
from __future__ import annotations

from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from tests.conftest import headers


def ask(client, body, project="ml-vision"):
    reply = client.post("/v1/leases", json=body, headers=headers(project))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def get(client, lease_id, project="ml-vision"):
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]


def failures(sessions, lease_id):
    with session_scope(sessions) as s:
        return [(f.failure_class, f.message) for f in s.scalars(
            select(m.LeaseFailure).where(m.LeaseFailure.lease_id == lease_id))]


def hosts_of(sessions, lease_id):
    with session_scope(sessions) as s:
        return sorted({a.host for a in s.get(m.Lease, lease_id).allocations})


def test_ending_a_lease_in_the_second_it_began_provisioning_keeps_its_gpus_held(client, runtime, cloud,
                                                                               engine_tick):
    """Case 3: the lease's VM is booting on its GPUs; ending it then must not hand them on."""
    first = ask(client, {"shape": "h100.x4", "duration": "PT1H"})
    engine_tick()                                   # provisioning, its VM asked for, this same second
    assert get(client, first["id"])["status"] == "provisioning"
    host = hosts_of(runtime.sessions, first["id"])[0]
    assert client.delete(f"/v1/leases/{first['id']}", headers=headers()).status_code == 204
    assert cloud.free_gpus()[host] == 0             # the VM still holds them while it is deleted
    nxt = ask(client, {"shape": "h100.x4", "duration": "PT1H"}, project="nlp-lab")
    assert hosts_of(runtime.sessions, nxt["id"]) != [host]
    for _ in range(4):
        engine_tick(advance=10)
    assert get(client, nxt["id"], "nlp-lab")["status"] == "active"
    assert failures(runtime.sessions, nxt["id"]) == []

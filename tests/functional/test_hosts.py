"""/v1/hosts: admins see the GPU hosts and drain them; a drained host takes no new lease."""
from __future__ import annotations

from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import RELEASE, headers

ADMIN = headers("admin-project", "admin", "olga")


def test_admins_list_hosts_with_state_and_gpus_in_use(client):
    lease = client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT1H"}, headers=headers()).get_json()
    host = lease["lease"]["allocations"][0]["host"]
    listed = client.get("/v1/hosts", headers=ADMIN).get_json()["hosts"]
    assert [h["name"] for h in listed] == ["gpu-a100-1", "gpu-a100-2", "gpu-a100-3", "gpu-a100-4",
                                           "gpu-h100-1", "gpu-h100-2"]
    shown = client.get(f"/v1/hosts/{host}", headers=ADMIN).get_json()["host"]
    assert shown["in_use"] == 4 and shown["gpus"] == 8 and shown["in_service"] and not shown["drained"]
    assert sum(h["in_use"] for h in listed) == 4


def test_members_may_not_see_or_drain_hosts(client):
    assert client.get("/v1/hosts", headers=headers()).status_code == 403
    assert client.patch("/v1/hosts/gpu-a100-1", json={"drained": True}, headers=headers()).status_code == 403


def test_a_drained_host_takes_no_new_lease_until_undrained_and_the_change_is_audited(client, engine_tick):
    for name in ("gpu-a100-1", "gpu-a100-2", "gpu-a100-3"):
        reply = client.patch(f"/v1/hosts/{name}", json={"drained": True}, headers=ADMIN)
        assert reply.status_code == 200 and reply.get_json()["host"]["in_service"] is False
    placed = {client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=headers())
              .get_json()["lease"]["allocations"][0]["host"]}
    assert placed == {"gpu-a100-4"}
    waiting = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=headers())
    assert waiting.get_json()["lease"]["status"] == "queued"
    client.patch("/v1/hosts/gpu-a100-2", json={"drained": False}, headers=ADMIN)
    engine_tick()                                                    # the replan the change wakes
    lease = client.get(f"/v1/leases/{waiting.get_json()['lease']['id']}", headers=headers()).get_json()["lease"]
    assert lease["status"] in ("scheduled", "provisioning")
    assert lease["allocations"][0]["host"] == "gpu-a100-2"
    records = client.get("/v1/audit?action=host.update", headers=ADMIN).get_json()["audit_records"]
    assert [(r["target_id"], r["before"]["drained"], r["after"]["drained"]) for r in records] == [
        ("gpu-a100-1", False, True), ("gpu-a100-2", False, True), ("gpu-a100-3", False, True),
        ("gpu-a100-2", True, False)]


def test_bad_host_requests_get_clear_errors(client):
    assert client.get("/v1/hosts/nowhere", headers=ADMIN).status_code == 404
    assert client.patch("/v1/hosts/nowhere", json={"drained": True}, headers=ADMIN).status_code == 404
    for body in ({}, {"drained": "yes"}, {"drained": True, "up": False}):
        reply = client.patch("/v1/hosts/gpu-a100-1", json=body, headers=ADMIN)
        assert reply.status_code == 400 and reply.get_json()["errors"][0]["detail"]


def test_draining_moves_the_leases_planned_there_and_lets_the_running_ones_end(client, runtime, engine_tick):
    """An operator drains a host to empty it: what runs there runs to its end (held_until),
    what is only planned there moves to another host for the same start, and its owner is told."""
    running = client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT3H"}, headers=headers()).get_json()
    engine_tick()
    engine_tick(advance=30)
    running = client.get(f"/v1/leases/{running['lease']['id']}", headers=headers()).get_json()["lease"]
    assert running["status"] == "active"
    host = running["allocations"][0]["host"]
    later = rfc3339(runtime.clock.now() + 3600)
    planned = client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT1H", "start": later},
                          headers=headers()).get_json()["lease"]
    assert planned["status"] == "scheduled" and planned["allocations"][0]["host"] == host   # best fit: beside it
    reply = client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN)
    assert reply.status_code == 200 and reply.get_json()["host"]["held_until"] == \
        rfc3339(parse_time(running["end"]) + RELEASE)
    moved = client.get(f"/v1/leases/{planned['id']}", headers=headers()).get_json()["lease"]
    assert moved["status"] == "scheduled" and moved["start"] == planned["start"]
    assert moved["allocations"][0]["host"] != host
    told = [e for e in client.get(f"/v1/leases/{planned['id']}/events", headers=headers()).get_json()["events"]
            if e["kind"] == "host_drain"]
    assert len(told) == 1 and host in told[0]["message"]
    still = client.get(f"/v1/leases/{running['id']}", headers=headers()).get_json()["lease"]
    assert still["status"] == "active" and still["allocations"][0]["host"] == host and still["end"] == running["end"]
    # draining again moves nothing more, and undraining moves nothing back
    assert client.patch(f"/v1/hosts/{host}", json={"drained": True}, headers=ADMIN).status_code == 200
    assert client.patch(f"/v1/hosts/{host}", json={"drained": False}, headers=ADMIN).status_code == 200
    events = client.get(f"/v1/leases/{planned['id']}/events", headers=headers()).get_json()["events"]
    assert len([e for e in events if e["kind"] == "host_drain"]) == 1
    assert client.get(f"/v1/leases/{planned['id']}", headers=headers()).get_json()["lease"]["allocations"] == \
        moved["allocations"]

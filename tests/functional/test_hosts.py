"""/v1/hosts: admins see the GPU hosts and drain them; a drained host takes no new lease."""
from __future__ import annotations

from tests.conftest import headers

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

"""From request to ended on the simulated cloud and a virtual clock: the
events tell the whole story, and the cloud is left clean."""
from __future__ import annotations

from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import RELEASE, headers

HOUR = 3600


def states(client, lease_id, project="ml-vision"):
    events = client.get(f"/v1/leases/{lease_id}/events", headers=headers(project)).get_json()["events"]
    return [e["to"] for e in events if e["kind"] == "transition"]


def test_leases_run_one_after_the_other_to_ended(client, cloud, engine_tick):
    first = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H",
                                            "volume": {"size_gb": 50}}, headers=headers()).get_json()["lease"]
    other = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT3H"},
                        headers=headers("nlp-lab")).get_json()["lease"]
    second = client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT1H"},
                         headers=headers()).get_json()["lease"]
    assert first["status"] == other["status"] == "scheduled" and second["status"] == "queued"
    assert second["queue"]["eta"] == rfc3339(parse_time(first["end"]) + RELEASE)
    for _ in range(5 * 12):             # five hours in five-minute steps
        engine_tick(advance=300)
    assert states(client, first["id"]) == ["requested", "queued", "scheduled", "provisioning", "active",
                                           "ending", "ended"]
    lifecycle = ["requested", "queued", "scheduled", "provisioning", "active", "ending", "ended"]
    assert states(client, second["id"]) == lifecycle
    assert states(client, other["id"], "nlp-lab") == lifecycle
    assert cloud.servers() == {}
    assert cloud.free_gpus() == {h: (8 if "a100" in h else 4) for h in cloud.free_gpus()}
    volumes = [v for v in cloud.volumes().values() if v["lease_id"] == first["id"]]
    assert len(volumes) == 1 and volumes[0]["status"] == "available"
    events = client.get(f"/v1/leases/{first['id']}/events", headers=headers()).get_json()["events"]
    assert any(e["kind"] == "warning" for e in events)
    assert all(e["actor"] and e["message"] for e in events)


def test_a_boot_failure_is_classified_and_cleaned_up(client, cloud, engine_tick):
    from gpu_tenancy.domain.failures import FailureClass
    cloud.inject_failure("server_error", FailureClass.IMAGE)   # a user-level fault: no retry
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "volume": {"size_gb": 5}},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    engine_tick(advance=10)
    shown = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] == "failed"
    assert shown["failure"]["class"] == "image"
    assert "Image could not be found" not in shown["failure"]["message"]   # the cloud's words are the operators'
    operator = client.get(f"/v1/leases/{lease['id']}", headers=headers(roles="admin")).get_json()["lease"]
    assert "Image could not be found" in operator["failure"]["message"]
    assert cloud.servers() == {}
    assert [v["status"] for v in cloud.volumes().values()] == ["available"]


def test_provisioning_progress_is_told_in_events_until_active(client, engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "volume": {"size_gb": 5}},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=10)          # still building: the cloud's task is told once, not every tick
    engine_tick(advance=30)
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    progress = [e["message"] for e in events if e["kind"] == "progress"]
    assert progress[0].startswith("flavor gt-lease-") and " ready: one unit of CUSTOM_GT_LEASE_" in progress[0]
    progress = progress[1:]
    assert progress[0].startswith("data volume ")
    assert progress[1].startswith("VM 0 requested on ")
    assert progress[2:] == ["VM 0: spawning", f"VM 0 is active on {progress[1].split(' on ')[1].split(' ')[0]}",
                            "VM 0: fixed 10.1.0.2 on ml-vision-net"]

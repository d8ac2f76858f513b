"""Resilience on the real services: a host whose nova-compute stops loses its
leases to another host (same volume, owner told), takes nothing new until it is
back; and kill -9 of the engine at the boot and delete steps leaves no orphan."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpu_tenancy.db import models as m
from tests.consistency import assert_consistent
from tests.crash_harness import crash_then_restart, write_config
from tests.integration.conftest import ISOLATION_SPECS, CLOUDS, auth, gpu_usage, tagged_servers, wait_for

COMPUTE = Path(__file__).parents[2] / "scripts" / "loopback" / "compute.sh"


@pytest.fixture
def api(os_app, tokens, projects):
    client = os_app.test_client()
    for project in projects.values():
        body = {"quota": {"gpu_models": {"A100": {"gpus": 8}, "H100": {"gpus": 2}}}}
        assert client.put(f"/v1/quotas/{project}", json=body, headers=auth(tokens["gt-admin"])).status_code == 200
    return client


def show(client, token, lease_id):
    return client.get(f"/v1/leases/{lease_id}", headers=auth(token)).get_json()["lease"]


def tick_until(app, client, token, lease_id, check, what, timeout=150):
    runtime = app.extensions["gpu_tenancy"]

    def reached():
        runtime.engine.run_once()
        lease = show(client, token, lease_id)
        return lease if check(lease) else None
    return wait_for(what, reached, timeout=timeout, every=1)


def compute(action, host):
    if not os.environ.get("GT_LOOPBACK_DIR"):
        pytest.skip("GT_LOOPBACK_DIR (the running loopback cloud's directory) is needed to stop a nova-compute")
    subprocess.run(["bash", str(COMPUTE), action, host], check=True, capture_output=True)


def test_a_lease_on_a_host_whose_nova_compute_stops_moves_to_another(os_app, api, tokens, admin, os_cloud):
    alice = tokens["gt-alice"]
    runtime = os_app.extensions["gpu_tenancy"]
    runtime.engine.lifecycle.config.host_refresh_seconds = 0     # read Nova's service state every tick
    lease = api.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT1H", "volume": {"size_gb": 1}},
                     headers=auth(alice)).get_json()["lease"]
    active = tick_until(os_app, api, alice, lease["id"], lambda x: x["status"] == "active", "active")
    lost, old_server, volume = active["servers"][0]["host"], active["servers"][0]["id"], active["volume"]["id"]
    later = None
    compute("stop", lost)
    try:
        moved = tick_until(os_app, api, alice, lease["id"], lambda x: x["failures"], "the host to be seen down")
        assert [(f["class"], f["action"], f["hosts"]) for f in moved["failures"]] == [("host_down", "replaced", [lost])]
        events = api.get(f"/v1/leases/{lease['id']}/events", headers=auth(alice)).get_json()["events"]
        assert any(e["kind"] == "host_failure" and lost in e["message"] for e in events)
        again = tick_until(os_app, api, alice, lease["id"], lambda x: x["status"] == "active", "active again")
        assert again["servers"][0]["host"] != lost and again["end"] == active["end"]
        assert admin.compute.find_server(old_server, ignore_missing=True) is None
        attachments = admin.block_storage.get_volume(volume).attachments
        assert [a["server_id"] for a in attachments] == [again["servers"][0]["id"]]   # the same volume
        # nothing new on the down host: the only free A100 GPUs are there
        later = api.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT1H"},
                         headers=auth(tokens["gt-bob"])).get_json()["lease"]
        assert later["status"] == "queued" and later["allocations"] == []
    finally:
        compute("start", lost)
    wait_for(f"{lost} up again", lambda: {h.name: h for h in os_cloud.capacity()}[lost].up, timeout=90, every=2)
    back = tick_until(os_app, api, tokens["gt-bob"], later["id"], lambda x: x["allocations"], "placed when back")
    assert back["allocations"][0]["host"] == lost
    for token, lease_id in ((alice, lease["id"]), (tokens["gt-bob"], later["id"])):
        api.delete(f"/v1/leases/{lease_id}", headers=auth(token))
        tick_until(os_app, api, token, lease_id, lambda x: x["status"] in ("ended", "cancelled"), "ended")
    assert admin.block_storage.get_volume(volume).status == "available"     # kept
    assert_consistent(runtime.sessions, os_cloud, [lease["id"], later["id"]], volumes=[volume])
    admin.block_storage.delete_volume(volume, ignore_missing=True)


def test_a_lease_on_the_only_h100_host_waits_for_it_and_comes_back_first(os_app, api, tokens, admin, os_cloud):
    alice, bob = tokens["gt-alice"], tokens["gt-bob"]
    runtime = os_app.extensions["gpu_tenancy"]
    runtime.engine.lifecycle.config.host_refresh_seconds = 0
    lease = api.post("/v1/leases", json={"shape": "h100.x1", "duration": "PT1H", "volume": {"size_gb": 1}},
                     headers=auth(alice)).get_json()["lease"]
    active = tick_until(os_app, api, alice, lease["id"], lambda x: x["status"] == "active", "active")
    assert active["servers"][0]["host"] == "gpu-h100-1"
    volume, newer = active["volume"]["id"], None
    compute("stop", "gpu-h100-1")
    try:
        waiting = tick_until(os_app, api, alice, lease["id"], lambda x: x["failures"], "the host to be seen down")
        assert waiting["status"] == "queued" and waiting["servers"] == []   # no other H100 host
        assert admin.compute.find_server(active["servers"][0]["id"], ignore_missing=True) is None
        reply = api.post("/v1/leases", json={"shape": "h100.x1", "instances": 2, "duration": "PT1H"},
                         headers=auth(bob))
        assert reply.status_code == 201, reply.get_json()
        newer = reply.get_json()["lease"]
        assert newer["status"] == "queued" and newer["allocations"] == []    # nothing new goes there
    finally:
        compute("start", "gpu-h100-1")
    back = tick_until(os_app, api, alice, lease["id"], lambda x: x["status"] == "active", "active again",
                      timeout=180)
    assert back["servers"][0]["host"] == "gpu-h100-1"
    assert [a["server_id"] for a in admin.block_storage.get_volume(volume).attachments] == [back["servers"][0]["id"]]
    assert show(api, bob, newer["id"])["status"] == "queued"                 # the rescued lease went first
    for token, lease_id in ((alice, lease["id"]), (bob, newer["id"])):
        api.delete(f"/v1/leases/{lease_id}", headers=auth(token))
        tick_until(os_app, api, token, lease_id, lambda x: x["status"] in ("ended", "cancelled"), "ended")
    assert_consistent(runtime.sessions, os_cloud, [lease["id"], newer["id"]], volumes=[volume])
    admin.block_storage.delete_volume(volume, ignore_missing=True)


@pytest.mark.parametrize("step", ["boot_requested", "delete_requested"])
def test_kill_9_of_the_engine_at_boot_and_delete_leaves_nothing_behind(os_app, api, tokens, admin, os_cloud,
                                                                       keystone_config, tmp_path, step):
    alice = tokens["gt-alice"]
    runtime = os_app.extensions["gpu_tenancy"]
    config_path = write_config(tmp_path, database_url=keystone_config.database_url, auth_strategy="noauth2",
                               cloud_driver="openstack", clouds_yaml_cloud="gt-service", clouds_yaml_file=CLOUDS,
                               cloud_network="none", flavor_extra_specs=ISOLATION_SPECS)  # the GPU hosts' way in
    lease = api.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT45S", "volume": {"size_gb": 1}},
                     headers=auth(alice)).get_json()["lease"]
    outcome = crash_then_restart(tmp_path, config_path, runtime.sessions, lease["id"], step, timeout=150)
    assert outcome.killed, outcome.engine_logs
    assert outcome.final_status == "ended" and outcome.reached_active, outcome.engine_logs
    with runtime.sessions() as s:
        volume = s.get(m.Lease, lease["id"]).volume_id
    wait_for("GPUs free in Placement", lambda: not tagged_servers(admin) and not any(gpu_usage(admin).values()))
    assert_consistent(runtime.sessions, os_cloud, [lease["id"]], volumes=[volume])
    assert admin.block_storage.get_volume(volume).status == "available"
    admin.block_storage.delete_volume(volume)

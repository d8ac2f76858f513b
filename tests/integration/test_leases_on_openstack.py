"""Leases through the service's API, with Keystone tokens, on the real
services: boot to ACTIVE on the planned host with GPUs allocated in Placement
and the volume attached; gangs; waiting; ending releases and keeps the volume."""
from __future__ import annotations

import pytest

from gpu_tenancy.timeutil import parse_time
from tests.integration.conftest import auth, gpu_usage, wait_for

HOUR = 3600


@pytest.fixture
def api(os_app, tokens, projects):
    """A client with quotas set by the admin through the API."""
    client = os_app.test_client()
    for project in projects.values():
        body = {"quota": {"gpu_models": {"A100": {"gpus": 8}, "H100": {"gpus": 2}}}}
        reply = client.put(f"/v1/quotas/{project}", json=body, headers=auth(tokens["gt-admin"]))
        assert reply.status_code == 200, reply.get_json()
    return client


def tick_until(app, client, token, lease_id, status, timeout=120):
    runtime = app.extensions["gpu_tenancy"]

    def reached():
        runtime.engine.run_once()
        lease = client.get(f"/v1/leases/{lease_id}", headers=auth(token)).get_json()["lease"]
        if lease["status"] == "failed" and status != "failed":
            pytest.fail(f"lease failed: {lease.get('failure')}")
        skip_to_planned_start(runtime.clock, lease)
        return lease if lease["status"] == status else None

    def where() -> str:
        lease = client.get(f"/v1/leases/{lease_id}", headers=auth(token)).get_json()["lease"]
        events = client.get(f"/v1/leases/{lease_id}/events", headers=auth(token)).get_json()["events"]
        return (f"it is {lease['status']} (queue {lease.get('queue')}, servers {lease['servers']}); "
                f"its last events: {[(e.get('kind'), e.get('to'), e.get('message')) for e in events[-5:]]}")
    return wait_for(f"lease {lease_id} to be {status}", reached, timeout=timeout, every=0.5, detail=where)


def skip_to_planned_start(clock, lease) -> None:
    """A lease put back after a failed boot (the loopback's claim race, shared
    OPENSTACK-LOOPBACK.md trap 9) is planned on its hosts after a backoff; this
    clock moves only when told, so move it there rather than wait for ever."""
    start = lease.get("start")
    if lease["status"] == "scheduled" and start and parse_time(start) > clock.now():
        clock.set(parse_time(start))


def create(client, token, **body):
    reply = client.post("/v1/leases", json={"duration": "PT1H", **body}, headers=auth(token))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def placement_gpus(admin, server_id) -> dict[str, int]:
    """The server's GPU allocation in Placement, per host."""
    allocation = admin.placement.get_allocation(server_id).allocations or {}
    roots = {rp.id: rp for rp in admin.placement.resource_providers()}
    out: dict[str, int] = {}
    for rp_id, entry in allocation.items():
        gpus = sum(n for rc, n in entry["resources"].items() if rc.startswith("CUSTOM_PGPU_"))
        if gpus:
            host = roots[roots[rp_id].root_provider_id].name
            out[host] = out.get(host, 0) + gpus
    return out


def test_an_a100_x2_lease_runs_on_its_planned_host_with_gpus_and_volume(os_app, api, tokens, admin, projects):
    alice = tokens["gt-alice"]
    lease = create(api, alice, shape="a100.x2", volume={"size_gb": 1})
    assert lease["status"] == "scheduled"
    planned = lease["servers"][0]["host"] if lease["servers"] else None
    active = tick_until(os_app, api, alice, lease["id"], "active")
    server = active["servers"][0]
    assert planned in (None, server["host"])
    nova = admin.compute.get_server(server["id"])
    assert (nova.status, nova.compute_host, nova.project_id) == ("ACTIVE", server["host"], projects["tenant-a"])
    assert nova.metadata["gpu_tenancy_lease"] == lease["id"]
    assert placement_gpus(admin, server["id"]) == {server["host"]: 2}
    volume = admin.block_storage.get_volume(active["volume"]["id"])
    assert volume.status == "in-use" and volume.attachments[0]["server_id"] == server["id"]
    events = api.get(f"/v1/leases/{lease['id']}/events", headers=auth(alice)).get_json()["events"]
    assert any("active on " + server["host"] in e["message"] for e in events)

    assert api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice)).status_code in (200, 202, 204)
    tick_until(os_app, api, alice, lease["id"], "ended")
    assert gpu_usage(admin).get(server["host"], 0) == 0
    assert admin.block_storage.get_volume(volume.id).status == "available"
    admin.block_storage.delete_volume(volume, ignore_missing=True)


def test_a_gang_of_two_a100_x4_lands_on_both_a100_hosts(os_app, api, tokens, admin):
    alice = tokens["gt-alice"]
    lease = create(api, alice, shape="a100.x4", instances=2)
    active = tick_until(os_app, api, alice, lease["id"], "active")
    hosts = sorted(s["host"] for s in active["servers"])
    assert hosts == ["gpu-a100-1", "gpu-a100-2"]
    for server in active["servers"]:
        assert placement_gpus(admin, server["id"]) == {server["host"]: 4}
    api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice))
    tick_until(os_app, api, alice, lease["id"], "ended")
    assert not any(gpu_usage(admin).values())


def test_a_lease_that_does_not_fit_waits_then_starts_when_the_one_before_ends(os_app, api, tokens, admin):
    alice, bob = tokens["gt-alice"], tokens["gt-bob"]
    first = create(api, alice, shape="a100.x4", instances=2, duration="PT1H")
    waiting = create(api, bob, shape="a100.x2", duration="PT1H")
    assert waiting["status"] == "queued"
    assert waiting["queue"]["position"] == 1 and waiting["queue"]["eta"] == first["end"]
    tick_until(os_app, api, alice, first["id"], "active")
    runtime = os_app.extensions["gpu_tenancy"]
    runtime.clock.advance(HOUR)            # the first lease's time is up
    tick_until(os_app, api, alice, first["id"], "ended")
    started = tick_until(os_app, api, bob, waiting["id"], "active")
    assert placement_gpus(admin, started["servers"][0]["id"]) == {started["servers"][0]["host"]: 2}
    api.delete(f"/v1/leases/{waiting['id']}", headers=auth(bob))
    tick_until(os_app, api, bob, waiting["id"], "ended")


def test_an_h100_lease_lands_on_the_h100_host_only(os_app, api, tokens, admin):
    bob = tokens["gt-bob"]
    lease = create(api, bob, shape="h100.x1")
    active = tick_until(os_app, api, bob, lease["id"], "active")
    server = active["servers"][0]
    assert server["host"] == "gpu-h100-1"
    allocation = admin.placement.get_allocation(server["id"]).allocations
    classes = {rc for entry in allocation.values() for rc in entry["resources"]}
    assert "CUSTOM_PGPU_H100" in classes and "CUSTOM_PGPU_A100" not in classes
    api.delete(f"/v1/leases/{lease['id']}", headers=auth(bob))
    tick_until(os_app, api, bob, lease["id"], "ended")


def test_an_inactive_image_fails_the_lease_before_anything_boots(os_app, api, tokens, admin):
    alice = tokens["gt-alice"]
    empty = admin.image.create_image(name="itest-inactive", disk_format="raw", container_format="bare",
                                     allow_duplicates=True)
    try:
        reply = api.post("/v1/images", json={"name": "broken", "cloud_ref": empty.id},
                         headers=auth(tokens["gt-admin"]))
        assert reply.status_code == 201, reply.get_json()
        lease = create(api, alice, shape="a100.x1", image="broken")
        failed = tick_until(os_app, api, alice, lease["id"], "failed")
        assert failed["failure"]["class"] == "image"
        assert all(s["id"] is None for s in failed["servers"])
        assert not [s for s in admin.compute.servers(all_projects=True, details=True)
                    if (s.metadata or {}).get("gpu_tenancy_lease") == lease["id"]]
    finally:
        admin.image.delete_image(empty, ignore_missing=True)


def test_the_users_own_volume_key_and_user_data_go_with_the_lease_and_the_volume_stays(
        os_app, api, tokens, admin, projects):
    alice_token = tokens["gt-alice"]
    from gpu_tenancy.cloud.openstack.connection import connect
    from tests.integration.conftest import CLOUDS
    alice = connect("gt-alice", CLOUDS)
    volume = alice.block_storage.create_volume(size=1, name="alice-dataset")
    key = alice.compute.create_keypair(name="alice-laptop")
    try:
        wait_for("alice's volume", lambda: alice.block_storage.get_volume(volume.id).status == "available")
        lease = create(api, alice_token, shape="a100.x1", volume={"id": volume.id}, key_name="alice-laptop",
                       user_data="#cloud-config\nruncmd: [nvidia-smi]\n")
        active = tick_until(os_app, api, alice_token, lease["id"], "active")
        server_id = active["servers"][0]["id"]
        nova = admin.compute.get_server(server_id)
        assert nova.key_name.startswith("gt-") and nova.project_id == projects["tenant-a"]
        import base64
        assert base64.b64decode(nova.user_data).decode().startswith("#cloud-config")
        attached = admin.block_storage.get_volume(volume.id)
        assert attached.status == "in-use" and attached.attachments[0]["server_id"] == server_id
        # the service user's one-off copy of the key is gone once the server was made
        assert [k.name for k in connect("gt-service", CLOUDS).compute.keypairs() if k.name.startswith("gt-")] == []

        api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice_token))
        tick_until(os_app, api, alice_token, lease["id"], "ended")
        kept = alice.block_storage.get_volume(volume.id)
        assert (kept.status, kept.attachments) == ("available", [])
    finally:
        alice.compute.delete_keypair(key, ignore_missing=True)
        wait_for("the volume to be deletable",
                 lambda: alice.block_storage.get_volume(volume.id).status == "available", timeout=60)
        alice.block_storage.delete_volume(volume, ignore_missing=True)


def test_a_key_pair_the_user_does_not_have_fails_the_lease_as_a_key_pair_failure(os_app, api, tokens, admin):
    alice = tokens["gt-alice"]
    lease = create(api, alice, shape="a100.x1", key_name="nobody-has-this-key")
    failed = tick_until(os_app, api, alice, lease["id"], "failed")
    assert failed["failure"]["class"] == "key_pair"
    assert "nobody-has-this-key" in failed["failure"]["message"]

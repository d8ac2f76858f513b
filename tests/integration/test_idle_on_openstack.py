"""GPUs held but idle, on the loopback cloud: a lease whose agent reports its GPUs idle is
warned and then ended by the operator's rule, its GPUs come back in Placement and go to
the lease that waited for them; a lease said done ends the same way. (The VMs of the
fake GPU hosts run nothing: the test sends the agent's reports, with the lease's secret.)"""
from __future__ import annotations

import pytest

from gpu_tenancy.config import idle_rules
from tests.integration.conftest import auth, gpu_usage
from tests.integration.test_leases_on_openstack import api, create, placement_gpus, tick_until  # noqa: F401

MINUTE = 60


@pytest.fixture
def keystone_config(keystone_config):
    keystone_config.readiness_url = "http://127.0.0.1:9"   # the VMs run no probe here
    keystone_config.idle_rule_set = idle_rules([{"warn_after_minutes": 2, "then": "end", "then_after_minutes": 4}])
    return keystone_config


def report_idle(client, lease, token, instances=2, gpus=4):
    for vm in range(instances):
        reply = client.post(f"/v1/leases/{lease}/utilization", headers={"X-Lease-Token": token}, json={
            "instance": vm, "gpus": [{"index": i, "utilization": 0, "memory_used_mib": 0} for i in range(gpus)]})
        assert reply.status_code == 200, reply.get_json()


def test_an_idle_lease_is_warned_ended_and_its_gpus_go_to_the_waiting_lease(os_app, api, tokens, admin):
    alice, bob = tokens["gt-alice"], tokens["gt-bob"]
    runtime = os_app.extensions["gpu_tenancy"]
    idle = create(api, alice, shape="a100.x4", instances=2, readiness_probe=True, duration="PT8H")
    token = idle["readiness"]["token"]
    waiting = create(api, bob, shape="a100.x2")
    assert waiting["status"] == "queued"
    active = tick_until(os_app, api, alice, idle["id"], "active")
    assert sorted(s["host"] for s in active["servers"]) == ["gpu-a100-1", "gpu-a100-2"]
    warned = False
    for _ in range(5):
        report_idle(api, idle["id"], token)
        runtime.clock.advance(MINUTE)
        runtime.engine.run_once()
        events = api.get(f"/v1/leases/{idle['id']}/events", headers=auth(alice)).get_json()["events"]
        warned = warned or any(e["kind"] == "warning" and "under 5 %" in e["message"] for e in events)
        if any(e["to"] == "ending" for e in events):
            break
    assert warned
    ended = tick_until(os_app, api, alice, idle["id"], "ended")
    assert ended["status"] == "ended"
    started = tick_until(os_app, api, bob, waiting["id"], "active")
    server = started["servers"][0]
    assert placement_gpus(admin, server["id"]) == {server["host"]: 2}
    assert sum(gpu_usage(admin).values()) == 2          # the idle lease's 8 came back
    # bob's job is done: a member says so with a token
    reply = api.post(f"/v1/leases/{waiting['id']}/done", json={"detail": "exit 0"}, headers=auth(bob))
    assert reply.status_code == 200, reply.get_json()
    tick_until(os_app, api, bob, waiting["id"], "ended")
    assert not any(gpu_usage(admin).values())

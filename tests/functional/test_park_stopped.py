"""Parking a lease one of whose VMs its tenant stopped (SHUTOFF in Nova). Nova shelves a
stopped server as it does a running one (its shelve takes vm_state active, stopped, paused or
suspended), and unshelves it ACTIVE: the park must not wait on it until it fails the lease,
deleting every VM of it, the shelved one's disk too."""
from __future__ import annotations

from gpu_tenancy.engine import park as lease_park
from gpu_tenancy.timeutil import parse_time
from tests.functional.test_idle_rules import lease_of
from tests.functional.test_park import config, until_resumed  # noqa: F401  (config: the idle rules, park grace)
from tests.functional.test_park_hosts import running_pair


def test_a_lease_with_a_stopped_vm_parks_and_resumes(client, runtime, engine_tick, cloud):
    made, first, second = running_pair(client, engine_tick)
    cloud.power_off(second["id"])          # the tenant stopped one VM; the other reports idle GPUs
    assert cloud.server_state(second["id"]).status == "SHUTOFF"
    lc = runtime.engine.lifecycle
    lease_park.begin(lc, made["id"], "idle")
    for _ in range(4):
        engine_tick(advance=10)
    after = lease_of(client, made["id"])
    assert after["failures"] == []
    assert after["status"] == "parked"
    assert [cloud.server_state(s["id"]).status for s in (first, second)] == ["SHELVED_OFFLOADED"] * 2
    # and back at its slot, both VMs ACTIVE again
    back = until_resumed(client, runtime, engine_tick, made["id"], parse_time(after["park"]["resume_by"]))
    assert back["status"] == "active" and back["failures"] == []
    assert [cloud.server_state(s["id"]).status for s in (first, second)] == ["ACTIVE"] * 2

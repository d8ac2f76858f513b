"""A tenant lease moved off a down host to wait in the queue: its access to the lease's flavor
is revoked and its unit taken off the old hosts; a cloud that refuses that once is asked again
at the next pass (the tenant kept its access, booted a VM on the old host outside the ledger,
on GPUs the ledger gave to the next lease)."""
from __future__ import annotations

import pytest

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.timeutil import parse_time
from tests.conftest import headers


def show(client, lid, project="ml-vision"):
    return client.get(f"/v1/leases/{lid}", headers=headers(project)).get_json()["lease"]


def test_a_refused_revoke_after_a_rescue_is_tried_again_at_the_next_pass(client, runtime, cloud,
                                                                               engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H",
                                            "boot": "tenant"}, headers=headers()).get_json()["lease"]
    for _ in range(2):   # the other two hosts are nlp-lab's for 4 h
        client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H"}, headers=headers("nlp-lab"))
    engine_tick()
    engine_tick(advance=30)
    active = show(client, lease["id"])
    assert active["status"] == "active"
    hosts = sorted({a["host"] for a in active["allocations"]})
    assert len(hosts) == 2
    flavor = active["flavor"]["id"]
    mine = [cloud.tenant_boot("ml-vision", flavor) for _ in range(2)]
    engine_tick(advance=30)
    down, up = hosts
    cloud.inject_failure("revoke_lease_flavor", F.API_ERROR)   # one 500 from Nova's flavor-access API
    cloud.set_host_state(down, up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    moved = show(client, lease["id"])
    # nothing free now (the other two hosts are nlp-lab's for 4 h): it waits, holding no GPU now
    assert moved["status"] in ("queued", "scheduled"), moved["status"]
    assert all(parse_time(a["start"]) > runtime.clock.now() + 3600 for a in moved["allocations"]), moved["allocations"]
    assert all(cloud.server_state(s).status == "DELETED" for s in mine)
    runtime.clock.advance(cloud.delete_seconds + 1)             # the old VMs' GPUs are released
    engine_tick(advance=30)   # the next pass revokes it again
    assert "ml-vision" not in cloud.flavors()[flavor]["access"]
    with pytest.raises(CloudError):   # no VM outside the ledger
        cloud.tenant_boot("ml-vision", flavor)

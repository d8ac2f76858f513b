"""A lease is the only way to its GPUs (issue 17): its own flavor, which the cloud lets
its project boot only while the lease is active, only on its hosts and only up to its
VMs; and the two boot modes, the service's and the tenant's."""
from __future__ import annotations

import pytest

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.db import models as m
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers


def ask(client, **body):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", **body}, headers=headers())
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def show(client, lease_id):
    return client.get(f"/v1/leases/{lease_id}", headers=headers()).get_json()["lease"]


def end(client, engine_tick, lease_id):
    assert client.delete(f"/v1/leases/{lease_id}", headers=headers()).status_code == 204
    for _ in range(3):
        engine_tick(advance=30)
    assert show(client, lease_id)["status"] == "ended"


def refused(cloud, project, flavor_id, clock_advance):
    """A member's boot is refused: by Nova outright, or the server goes ERROR (no valid host)."""
    try:
        server = cloud.tenant_boot(project, flavor_id)
    except CloudError:
        return True
    clock_advance()
    state = cloud.server_state(server)
    cloud.delete_server(server)
    return state.status == "ERROR" and "No valid host" in state.fault


def test_a_service_lease_boots_its_vms_with_its_own_flavor_granted_only_while_active(client, cloud, engine_tick):
    lease = ask(client, instances=2)
    engine_tick()
    provisioning = show(client, lease["id"])
    assert provisioning["status"] == "provisioning" and provisioning["boot"] == "service"
    flavor = provisioning["flavor"]
    assert flavor["name"] == f"gt-lease-{lease['id']}"
    assert cloud.flavors()[flavor["id"]]["access"] == []          # booting: the tenant has no access yet
    assert {s["flavor_id"] for s in cloud.servers().values()} == {flavor["id"]}
    hosts = sorted(a["host"] for a in provisioning["allocations"])
    assert sum(cloud.lease_inventory()[lease["id"]].values()) == 2
    assert sorted(h for h, n in cloud.lease_inventory()[lease["id"]].items() for _ in range(n)) == hosts
    engine_tick(advance=30)
    active = show(client, lease["id"])
    assert active["status"] == "active" and active["vms_free"] == 0
    assert cloud.flavors()[flavor["id"]]["access"] == ["ml-vision"]
    assert refused(cloud, "ml-vision", flavor["id"], lambda: engine_tick(advance=30))   # its 2 VMs are taken
    end(client, engine_tick, lease["id"])
    assert cloud.servers() == {} and cloud.flavors() == {}
    assert cloud.leases_in_cloud() == set() and cloud.lease_inventory() == {} and cloud.lease_classes() == set()


def test_a_tenant_lease_boots_nothing_and_records_the_servers_its_members_boot(client, cloud, runtime, engine_tick):
    own = cloud.add_volume("ml-vision", 20)
    lease = ask(client, instances=2, boot="tenant", start=rfc3339(runtime.clock.now() + 600))
    assert lease["status"] == "scheduled" and lease["boot"] == "tenant" and lease["image"] is None
    engine_tick()
    assert show(client, lease["id"])["flavor"] is None          # not made before the start
    engine_tick(advance=600)
    active = show(client, lease["id"])
    assert active["status"] == "active" and active["servers"] == [] and active["vms_free"] == 2
    assert cloud.servers() == {}                                  # the service booted nothing
    flavor = active["flavor"]["id"]
    assert refused(cloud, "nlp-lab", flavor, lambda: engine_tick(advance=30))   # another project
    first = cloud.tenant_boot("ml-vision", flavor, name="trainer-0")
    second = cloud.tenant_boot("ml-vision", flavor, name="trainer-1")
    engine_tick(advance=30)
    cloud.attach_volume(first, own)                               # the tenant's own volume on its own server
    assert refused(cloud, "ml-vision", flavor, lambda: engine_tick(advance=30))  # beyond its instances
    engine_tick()
    shown = show(client, lease["id"])
    live = [s for s in shown["servers"] if s["status"] != "DELETED"]   # the refused one came and went
    assert sorted((s["id"], s["status"]) for s in live) == sorted([(first, "ACTIVE"), (second, "ACTIVE")])
    assert {s["host"] for s in live} <= {a["host"] for a in shown["allocations"]}
    assert shown["vms_free"] == 0
    cloud.delete_server(second)                                    # the tenant deletes one itself
    engine_tick(advance=10)
    assert show(client, lease["id"])["vms_free"] == 1
    events = [e["message"] for e in client.get(f"/v1/leases/{lease['id']}/events",
                                               headers=headers()).get_json()["events"]]
    assert any(f"server {first} (trainer-0) seen: ACTIVE" in e for e in events)
    assert f"server {second} is gone" in events
    end(client, engine_tick, lease["id"])
    assert cloud.servers() == {}                                   # the tenant's servers deleted at the end
    assert cloud.volumes()[own]["status"] == "available"           # their volumes kept
    assert cloud.flavors() == {} and cloud.leases_in_cloud() == set()
    assert refused(cloud, "ml-vision", flavor, lambda: engine_tick(advance=30))   # after the end
    with runtime.sessions() as s:
        assert {sv.status for sv in s.get(m.Lease, lease["id"]).servers} == {"DELETED"}


def test_a_tenant_boot_before_the_start_is_refused(client, cloud, runtime, engine_tick):
    lease = ask(client, boot="tenant", start=rfc3339(runtime.clock.now() + 600))
    engine_tick()
    flavors = list(cloud.flavors())
    assert flavors == []                       # nothing to boot with before the start
    engine_tick(advance=600)
    flavor = show(client, lease["id"])["flavor"]["id"]
    server = cloud.tenant_boot("ml-vision", flavor)
    engine_tick(advance=30)
    assert cloud.server_state(server).status == "ACTIVE"


@pytest.mark.parametrize("extra", [{"image": "ubuntu-22.04-cuda-12"}, {"volume": {"size_gb": 10}},
                                   {"key_name": "mine"}, {"readiness_probe": True}, {"user_data": "#!/bin/sh"}])
def test_what_only_the_services_boot_uses_is_a_400_for_a_tenant_lease(client, cloud, extra):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "boot": "tenant", **extra},
                        headers=headers())
    assert reply.status_code == 400
    error = reply.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.not_for_tenant_boot" and next(iter(extra)) in error["detail"]
    assert client.get("/v1/leases", headers=headers()).get_json()["leases"] == []


def test_an_unknown_boot_mode_is_a_400(client):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "boot": "nobody"},
                        headers=headers())
    assert reply.status_code == 400


def test_a_re_placed_lease_moves_its_inventory_and_its_tenant_loses_access(client, cloud, runtime, engine_tick):
    lease = ask(client, boot="tenant")
    engine_tick()
    active = show(client, lease["id"])
    assert active["status"] == "active"
    host = active["allocations"][0]["host"]
    server = cloud.tenant_boot("ml-vision", active["flavor"]["id"])   # booted since the last pass
    cloud.set_host_state(host, up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    assert cloud.server_state(server).status == "DELETED"            # its VMs there are gone
    moved = show(client, lease["id"])
    assert moved["allocations"][0]["host"] != host
    assert host not in cloud.lease_inventory().get(lease["id"], {})
    if moved["status"] != "active":
        assert cloud.flavors()[moved["flavor"]["id"]]["access"] == []
    engine_tick(advance=30)
    again = show(client, lease["id"])
    assert again["status"] == "active"
    assert cloud.lease_inventory()[lease["id"]] == {again["allocations"][0]["host"]: 1}


def cancelled_after_a_failed_boot(client, cloud, engine_tick) -> tuple[dict, str]:
    """A lease sent back to wait after a boot the cloud refused, then cancelled: (its last view
    before the cancel, its flavor id)."""
    from gpu_tenancy.domain.failures import FailureClass
    busy = [ask(client, shape="a100.x8", duration="PT2H")]
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H"},
                        headers=headers("nlp-lab"))
    busy.append(reply.get_json()["lease"])
    engine_tick()
    engine_tick(advance=30)
    other = client.get(f"/v1/leases/{busy[1]['id']}", headers=headers("nlp-lab")).get_json()["lease"]
    assert [show(client, busy[0]["id"])["status"], other["status"]] == ["active", "active"]   # 3 of 4 A100 hosts
    lease = ask(client, shape="a100.x8")
    cloud.inject_failure("server_error", FailureClass.NO_VALID_HOST)
    engine_tick()
    for _ in range(3):
        engine_tick(advance=20)
    waiting = show(client, lease["id"])
    assert waiting["status"] == "scheduled" and waiting["flavor"], waiting   # re-placed after the busy ones
    assert lease["id"] in cloud.leases_in_cloud()
    assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code == 204
    return lease, waiting["flavor"]["id"]


def test_a_lease_cancelled_while_it_waits_again_after_a_failed_boot_leaves_nothing_in_the_cloud(
        client, cloud, runtime, engine_tick):
    """Sent back to wait after a boot the cloud refused, a lease keeps its class, inventory where it
    is planned next and flavor; cancelled so, it never ends in the cloud: the next pass removes them
    (not the reconcile, a minute or more later)."""
    lease, flavor = cancelled_after_a_failed_boot(client, cloud, engine_tick)
    engine_tick()
    assert lease["id"] not in cloud.lease_inventory()
    assert lease["id"] not in cloud.leases_in_cloud()
    assert flavor not in cloud.flavors()
    assert show(client, lease["id"])["flavor"] is None


def test_leftovers_the_cloud_refuses_to_remove_are_tried_again_less_and_less_often(
        client, cloud, runtime, engine_tick, monkeypatch):
    """While the cloud refuses, each try is several API calls and a warning: after a refusal the
    next comes after a doubling wait (10 s, 20 s, ... up to 10 min), not at every pass; once the
    cloud takes it again, the leftovers go at the next try."""
    from gpu_tenancy.cloud.driver import CloudError
    from gpu_tenancy.domain.failures import FailureClass
    from gpu_tenancy.engine.lease_flavor import LEFTOVER_WAIT_MAX
    lease, flavor = cancelled_after_a_failed_boot(client, cloud, engine_tick)
    tries = []

    def refuse(lease_id):
        tries.append(runtime.clock.now())
        raise CloudError(FailureClass.API_ERROR, "placement is down")
    monkeypatch.setattr(cloud, "remove_lease_inventory", refuse)
    start = runtime.clock.now()
    for _ in range(360):   # an hour of passes, 10 s apart
        engine_tick(advance=10)
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    assert 8 <= len(tries) <= 16   # not 360
    assert gaps == sorted(gaps) and gaps[0] <= 20 and max(gaps) <= LEFTOVER_WAIT_MAX + 10
    assert lease["id"] in cloud.leases_in_cloud() and show(client, lease["id"])["flavor"]
    monkeypatch.undo()
    for _ in range(LEFTOVER_WAIT_MAX // 10 + 1):
        engine_tick(advance=10)
    assert lease["id"] not in cloud.leases_in_cloud() and flavor not in cloud.flavors()
    assert show(client, lease["id"])["flavor"] is None and runtime.engine.lifecycle.leftover_tries == {}
    assert tries[0] - start <= 10


def test_a_tenant_server_the_cloud_hid_for_a_pass_is_still_deleted_at_the_end(client, cloud, engine_tick,
                                                                              monkeypatch):
    """A member's server can drop out of the lease's servers for a while and come back: resized to
    another flavor and reverted, or soft-deleted and restored. Recorded gone meanwhile, it is
    still the lease's at the end: deleted, not left running on the lease's GPUs past its end (the
    lease stuck ending, its unit held)."""
    lease = ask(client, boot="tenant")
    engine_tick()
    flavor = show(client, lease["id"])["flavor"]["id"]
    server = cloud.tenant_boot("ml-vision", flavor, name="trainer")
    engine_tick(advance=30)
    real = cloud.lease_servers
    monkeypatch.setattr(cloud, "lease_servers", lambda lease_id: [s for s in real(lease_id) if s.id != server])
    engine_tick(advance=10)                                        # resized away: not the lease's flavor now
    assert {s["id"]: s["status"] for s in show(client, lease["id"])["servers"]} == {server: "DELETED"}
    monkeypatch.setattr(cloud, "lease_servers", real)              # the resize reverted: back on the lease's GPUs
    assert cloud.server_state(server).status == "ACTIVE"
    end(client, engine_tick, lease["id"])
    assert cloud.server_state(server).status == "DELETED"
    assert cloud.leases_in_cloud() == set() and cloud.flavors() == {}


def test_a_tenant_server_resized_off_the_lease_and_not_confirmed_does_not_keep_the_lease_ending(
        client, cloud, engine_tick):
    """A member resizes its server of the lease's flavor to a plain flavor and never confirms it
    (VERIFY_RESIZE). Its new flavor is not the lease's, so it is not the lease's server any more,
    but Nova keeps the old flavor's claim (the lease's GPUs and unit) until the resize is confirmed
    or reverted: the lease's inventory could not be removed, and the lease stayed `ending`, its
    GPUs taken, until the tenant confirmed. At the end the service confirms it: the server goes on,
    the tenant's, on its new flavor, and the lease's GPUs are free."""
    lease = ask(client, boot="tenant")
    engine_tick()
    flavor = show(client, lease["id"])["flavor"]["id"]
    server = cloud.tenant_boot("ml-vision", flavor, name="trainer")
    engine_tick(advance=30)
    host = cloud.servers()[server]["host"]
    free = cloud.free_gpus()[host]
    cloud.resize(server)
    engine_tick(advance=10)
    assert cloud.server_state(server).status == "VERIFY_RESIZE"
    end(client, engine_tick, lease["id"])
    assert cloud.server_state(server).status == "ACTIVE"        # the tenant's, on its new flavor
    assert cloud.free_gpus()[host] == free + 1
    assert cloud.leases_in_cloud() == set() and cloud.flavors() == {}
    assert any("resize" in e["message"] for e in client.get(f"/v1/leases/{lease['id']}/events",
                                                            headers=headers()).get_json()["events"])


def test_a_tenant_server_resized_and_reverted_at_the_end_is_deleted_with_the_lease(client, cloud, engine_tick):
    lease = ask(client, boot="tenant")
    engine_tick()
    server = cloud.tenant_boot("ml-vision", show(client, lease["id"])["flavor"]["id"], name="trainer")
    engine_tick(advance=30)
    cloud.resize(server)
    engine_tick(advance=10)
    cloud.revert_resize(server)                                     # back on the lease's flavor
    end(client, engine_tick, lease["id"])
    assert cloud.server_state(server).status == "DELETED"
    assert cloud.leases_in_cloud() == set() and cloud.flavors() == {}


def test_a_tenant_server_resized_off_the_lease_just_before_its_end_is_kept_not_deleted(
        client, cloud, engine_tick):
    """As above, but the lease ends (its cancel) before any pass saw the server leave the lease's
    flavor: it was still recorded as the lease's, and the end deleted it, the member's server
    and what it held lost, where a pass later it would have been kept on its new flavor."""
    lease = ask(client, boot="tenant")
    engine_tick()
    server = cloud.tenant_boot("ml-vision", show(client, lease["id"])["flavor"]["id"], name="trainer")
    engine_tick(advance=30)
    host = cloud.servers()[server]["host"]
    free = cloud.free_gpus()[host]
    cloud.resize(server)                                            # no pass sees it before the end
    end(client, engine_tick, lease["id"])
    assert cloud.server_state(server).status == "ACTIVE"        # the tenant's, on its new flavor
    assert cloud.free_gpus()[host] == free + 1
    assert cloud.leases_in_cloud() == set() and cloud.flavors() == {}

"""A member's server resized off its tenant lease's flavor, at the lease's end: a server on a
flavor without GPUs, or on another lease's flavor, is no longer the lease's and is kept
(released, with an event); one still on the lease's flavor, or on a GPU flavor no lease
accounts for, is deleted, so that no GPU stays taken past the lease's end outside the ledger."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.cloud.driver import ShapeSpec
from gpu_tenancy.cloud.simulated_leases import PLAIN_FLAVOR
from tests.conftest import headers
from tests.functional.test_lease_flavors import ask, end, show


def events(client, lease_id):
    return [e["message"] or "" for e in client.get(f"/v1/leases/{lease_id}/events", headers=headers())
            .get_json()["events"]]


def boot_member(client, cloud, engine_tick, **body):
    """An active tenant lease of one A100 and a server its member booted with its flavor."""
    lease = ask(client, boot="tenant", **body)
    engine_tick()
    server = cloud.tenant_boot("ml-vision", show(client, lease["id"])["flavor"]["id"], name="trainer")
    engine_tick(advance=30)
    assert [s["id"] for s in show(client, lease["id"])["servers"]] == [server]
    return lease, server


@pytest.mark.parametrize("seen", [False, True], ids=["ended-before-a-pass", "seen-by-a-pass"])
def test_a_server_its_member_resized_to_a_plain_flavor_and_confirmed_is_kept_at_the_end(
        client, cloud, engine_tick, seen):
    """The member confirmed the resize itself: ACTIVE on a flavor without GPUs. Ended before any
    pass saw it leave the lease's flavor, it was still recorded as the lease's and deleted."""
    lease, server = boot_member(client, cloud, engine_tick)
    host = cloud.servers()[server]["host"]
    free = cloud.free_gpus()[host]
    cloud.resize(server)
    cloud.confirm_resize(server)                                    # the member's --confirm
    assert cloud.server_state(server).status == "ACTIVE"
    if seen:
        engine_tick(advance=10)
    end(client, engine_tick, lease["id"])
    kept = cloud.server_state(server)
    assert kept.status == "ACTIVE" and kept.flavor is not None and kept.flavor.id == PLAIN_FLAVOR
    assert cloud.free_gpus()[host] == free + 1
    assert cloud.leases_in_cloud() == set() and cloud.flavors() == {}
    assert sum("released from the lease" in e for e in events(client, lease["id"])) == (0 if seen else 1)


def test_a_server_resized_onto_another_lease_of_its_project_is_that_leases_not_deleted_by_this_one(
        client, cloud, engine_tick):
    """Its GPUs are the other lease's in the ledger (one unit of its class): kept at this lease's
    end, recorded by the other lease, and deleted at the other's end."""
    first, server = boot_member(client, cloud, engine_tick)
    second = ask(client, boot="tenant")
    engine_tick(advance=5)
    cloud.resize(server, show(client, second["id"])["flavor"]["id"])
    cloud.confirm_resize(server)
    end(client, engine_tick, first["id"])
    assert cloud.server_state(server).status == "ACTIVE"
    assert sum("released from the lease" in e and "another lease" in e for e in events(client, first["id"])) == 1
    engine_tick(advance=10)
    assert [s["id"] for s in show(client, second["id"])["servers"]] == [server]
    end(client, engine_tick, second["id"])
    assert cloud.server_state(server).status == "DELETED"
    assert cloud.leases_in_cloud() == set() and sum(cloud.free_gpus().values()) == 4 * 8 + 2 * 4


@pytest.mark.parametrize("confirmed", [True, False], ids=["confirmed", "unconfirmed"])
def test_a_server_resized_onto_a_gpu_flavor_no_lease_accounts_for_is_deleted_at_the_end(
        client, cloud, engine_tick, confirmed):
    """A hostile member: its project also sees a GPU flavor outside every lease (one the first wave
    left, say). Kept, the server would hold GPUs past the lease's end that the ledger gives to
    others; it is deleted (not confirmed), its GPUs released."""
    legacy = cloud.add_legacy_flavor("ml-vision", ShapeSpec("a100.x1", "A100", 1, 8, 65536, 100, "a100"))
    lease, server = boot_member(client, cloud, engine_tick)
    cloud.resize(server, legacy)
    if confirmed:
        cloud.confirm_resize(server)
    end(client, engine_tick, lease["id"])
    assert cloud.server_state(server).status == "DELETED"
    assert cloud.allocations() == {}
    assert sum(cloud.free_gpus().values()) == 4 * 8 + 2 * 4
    assert sum("GPU flavor no lease accounts for" in e for e in events(client, lease["id"])) == 1


@pytest.mark.parametrize("seed", range(6))
def test_at_a_tenant_leases_end_only_servers_off_every_lease_gpu_are_kept(client, cloud, engine_tick, seed):
    """Seeded walks: a member boots, resizes (to a plain flavor, another lease's, a GPU flavor no lease
    has), confirms, reverts and deletes at random, the engine passing or not between steps; the
    lease ends at a random step. Then every server still there is on a flavor without GPUs or on
    the other lease's (still active), the first lease left nothing in the cloud, and every GPU
    held is held by the other lease's servers."""
    rng = random.Random(seed)
    legacy = cloud.add_legacy_flavor("ml-vision", ShapeSpec("a100.x1", "A100", 1, 8, 65536, 100, "a100"))
    first = ask(client, boot="tenant", instances=3)
    other = ask(client, boot="tenant", instances=3, duration="PT3H")
    engine_tick()
    flavors = {lease["id"]: show(client, lease["id"])["flavor"]["id"] for lease in (first, other)}
    servers: list[str] = []
    for _ in range(rng.randint(3, 14)):
        step = rng.choice(["boot", "boot", "resize", "resize", "confirm", "revert", "delete", "pass"])
        live = [s for s in servers if cloud.server_state(s).status != "DELETED"]
        if step == "boot" and len(live) < 3:
            servers.append(cloud.tenant_boot("ml-vision", flavors[first["id"]]))
            engine_tick(advance=20)
        elif step == "resize" and live:
            target = rng.choice([PLAIN_FLAVOR, flavors[other["id"]], legacy])
            server = rng.choice(live)
            if cloud.server_state(server).status == "ACTIVE":
                try:
                    cloud.resize(server, target)
                except Exception:   # no host: Nova refuses the resize, the server stays as it was
                    pass
        elif step == "confirm" and live:
            cloud.confirm_resize(rng.choice(live))
        elif step == "revert" and live:
            cloud.revert_resize(rng.choice(live))
        elif step == "delete" and live:
            cloud.delete_server(rng.choice(live))
        if rng.random() < 0.4:
            engine_tick(advance=5)
    end(client, engine_tick, first["id"])
    assert first["id"] not in cloud.leases_in_cloud()
    for server in servers:
        state = cloud.server_state(server)
        if state.status == "DELETED":
            continue
        assert state.flavor is not None
        assert state.flavor.gpus is False or state.flavor.lease_id == other["id"], (server, state)
    holders = {s["lease_id"] for sid, s in cloud.servers().items() if sid in cloud.allocations()
               and cloud.allocations()[sid][1] > 0}
    assert holders <= {other["id"]}


def test_a_server_resized_off_the_lease_is_not_deleted_when_the_leases_host_goes_down(
        client, cloud, runtime, engine_tick):
    """A pass saw it leave the lease's flavor (recorded gone); then the lease's host went down and
    the lease was re-placed, deleting its VMs: the member's resized server with them."""
    lease, server = boot_member(client, cloud, engine_tick)
    host = cloud.servers()[server]["host"]
    cloud.resize(server)
    cloud.confirm_resize(server)
    engine_tick(advance=10)
    assert [s["status"] for s in show(client, lease["id"])["servers"]] == ["DELETED"]
    cloud.set_host_state(show(client, lease["id"])["allocations"][0]["host"], up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    assert show(client, lease["id"])["allocations"][0]["host"] != host
    assert cloud.server_state(server).status == "ACTIVE"

"""A lease is the only way to its GPUs, on the loopback cloud, tried as a plain member
(alice, tenant-a) with openstacksdk: the cloud itself refuses every boot outside the
lease (Placement finds no unit of the lease's class, Nova no flavor, the isolated
aggregates no host), whatever the service does.

The driver is driven here the way the engine drives a lease: class, inventory and
flavor before the start; access at the start; at the end access revoked, the servers
deleted, then inventory, flavor and class removed."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import ShapeSpec
from gpu_tenancy.cloud.openstack.connection import connect
from tests.integration.conftest import CLOUDS, gpu_usage, wait_for

A100_X1 = ShapeSpec("itest.a100x1", "A100", 1, 1, 512, 1, "a100")
TWO_HOSTS = {"gpu-a100-1": 1, "gpu-a100-2": 1}


def figure(what: str, seconds: float) -> None:
    print(f"\nfigure: {what}: {seconds:.2f} s", flush=True)


class Member:
    """A member's own connection and the servers it asked for (deleted at the end)."""

    def __init__(self, cloud_name: str, image_id: str, admin):
        self.conn, self.image, self.admin = connect(cloud_name, CLOUDS), image_id, admin
        self.made: list[str] = []
        self._lock = threading.Lock()

    def ask(self, flavor_id: str, conn=None) -> str | None:
        """Ask for a server (no host, no network); its id, or None when the API refused."""
        try:
            server = (conn or self.conn).compute.create_server(
                name=f"itest-enforce-{uuid.uuid4().hex[:6]}", flavor_id=flavor_id, image_id=self.image,
                networks="none")
        except sdk.HttpException:
            return None
        with self._lock:
            self.made.append(server.id)
        return server.id

    def settle(self, server_id: str) -> str:
        return wait_for("the server to leave BUILD",
                        lambda: (s := self.conn.compute.get_server(server_id).status) != "BUILD" and s)

    def boot(self, flavor_id: str) -> tuple[str | None, float]:
        """(server id if ACTIVE else None, seconds until the cloud answered for good)."""
        start = time.monotonic()
        server = self.ask(flavor_id)
        status = self.settle(server) if server else "refused by the API"
        return (server if status == "ACTIVE" else None), time.monotonic() - start

    def delete_all(self):
        for server in self.made:
            self.admin.compute.delete_server(server, ignore_missing=True)
        for server in self.made:
            wait_for("the member's server to go",
                     lambda s=server: self.admin.compute.find_server(s, ignore_missing=True) is None)


@pytest.fixture
def alice(admin, image_id, clean_cloud):
    member = Member("gt-alice", image_id, admin)
    yield member
    member.delete_all()
    wait_for("every GPU free again", lambda: not any(gpu_usage(admin).values()))


@pytest.fixture
def lease(os_cloud, projects):
    """A lease of tenant-a, its class, inventory and flavor removed at the end whatever is left."""
    lease_id = str(uuid.uuid4())
    yield lease_id, projects["tenant-a"]
    os_cloud.revoke_lease_flavor(lease_id, projects["tenant-a"])
    for server in os_cloud.lease_servers(lease_id):
        os_cloud.delete_server(server.id)
    wait_for("the lease's inventory to go", lambda: os_cloud.remove_lease_inventory(lease_id))
    os_cloud.remove_lease_flavor(lease_id)
    os_cloud.remove_lease_class(lease_id)


def host_of(admin, server_id: str) -> str:
    return admin.compute.get_server(server_id).compute_host


def test_a_member_boots_with_the_lease_flavor_only_within_its_window(os_cloud, lease, alice, admin):
    lease_id, project = lease
    os_cloud.ensure_lease_class(lease_id)
    flavor = os_cloud.ensure_lease_flavor(lease_id, project, A100_X1)
    assert flavor.id not in {f.id for f in alice.conn.compute.flavors(is_public=None)}

    refused, took = alice.boot(flavor.id)                          # before the window
    assert refused is None
    figure("a boot before the window refused (Nova: no such flavor)", took)

    os_cloud.set_lease_inventory(lease_id, TWO_HOSTS)              # the start
    os_cloud.grant_lease_flavor(lease_id, project)
    assert flavor.id in {f.id for f in alice.conn.compute.flavors(is_public=None)}
    servers = []
    for _ in TWO_HOSTS:
        server, took = alice.boot(flavor.id)
        assert server is not None
        figure("a member's boot in the lease to ACTIVE", took)
        servers.append(server)
    assert sorted(host_of(admin, s) for s in servers) == sorted(TWO_HOSTS)   # one on each planned host
    one_more, took = alice.boot(flavor.id)
    assert one_more is None
    figure("one more boot than the lease's VMs refused (Placement: no unit, ERROR)", took)
    assert {s.id for s in os_cloud.lease_servers(lease_id) if s.status == "ACTIVE"} == set(servers)

    os_cloud.revoke_lease_flavor(lease_id, project)                # the end, as the engine does it
    for server in os_cloud.lease_servers(lease_id):
        os_cloud.delete_server(server.id)
    wait_for("the lease's servers to go", lambda: not os_cloud.lease_servers(lease_id))
    wait_for("the lease's inventory to go", lambda: os_cloud.remove_lease_inventory(lease_id))
    after, took = alice.boot(flavor.id)
    assert after is None
    figure("a boot after the end refused", took)
    mine = {s.id for s in alice.conn.compute.servers()}
    assert not set(servers) & mine                                  # the lease's servers are gone
    os_cloud.remove_lease_flavor(lease_id)
    os_cloud.remove_lease_class(lease_id)
    assert lease_id not in os_cloud.leases_in_cloud()
    assert alice.boot(flavor.id)[0] is None


@pytest.fixture
def other_flavors(admin, projects):
    """Every other way to a GPU an operator or a first-wave service left behind."""
    made = []

    def make(name, specs, is_public, project=None):
        flavor = admin.compute.create_flavor(name=f"{name}-{uuid.uuid4().hex[:6]}", vcpus=1, ram=512, disk=1,
                                             is_public=is_public)
        made.append(flavor)
        if specs:
            admin.compute.create_flavor_extra_specs(flavor, specs)
        if project:
            admin.compute.flavor_add_tenant_access(flavor, project)
        return flavor.id

    a = projects["tenant-a"]
    yield {
        # what the first wave gave each project: gt-<shape>-<project>, private, with access
        "first-wave per-project flavor": make(f"gt-a100.x1-{a}", {
            "pci_passthrough:alias": "a100:1", "gpu_tenancy:shape": "a100.x1", "gpu_tenancy:project": a},
            False, a),
        "public flavor with the PCI alias": make("itest-public-gpu", {"pci_passthrough:alias": "a100:1"}, True),
        # every host of the loopback cloud is a GPU host: a plain flavor must not eat their CPU or RAM
        "public flavor without GPUs": make("itest-public-plain", {}, True),
    }
    for flavor in made:
        admin.compute.delete_flavor(flavor, ignore_missing=True)


def test_no_other_flavor_reaches_the_gpu_hosts(alice, other_flavors, admin):
    for what, flavor_id in other_flavors.items():
        server, took = alice.boot(flavor_id)
        assert server is None, f"{what} booted on {host_of(admin, server)}"
        figure(f"{what} refused", took)
        fault = admin.compute.get_server(alice.made[-1]).fault or {}
        assert "No valid host" in fault.get("message", ""), (what, fault)


def test_racing_member_boots_never_exceed_the_lease(os_cloud, lease, alice, admin):
    lease_id, project = lease
    os_cloud.ensure_lease_class(lease_id)
    flavor = os_cloud.ensure_lease_flavor(lease_id, project, A100_X1)
    os_cloud.set_lease_inventory(lease_id, TWO_HOSTS)
    os_cloud.grant_lease_flavor(lease_id, project)
    go = threading.Barrier(20)
    conns = [connect("gt-alice", CLOUDS) for _ in range(20)]       # each thread its own session
    for conn in conns:
        conn.authorize()

    def race(conn):
        go.wait()
        alice.ask(flavor.id, conn)

    start = time.monotonic()
    threads = [threading.Thread(target=race, args=(conn,)) for conn in conns]
    for thread in threads:
        thread.start()
    most, polls = 0, 0
    while True:
        states = [s.status for s in os_cloud.lease_servers(lease_id)]
        active = states.count("ACTIVE")
        most, polls = max(most, active), polls + 1
        assert active <= 2, f"{active} ACTIVE servers in a lease of 2 ({states})"
        if not any(t.is_alive() for t in threads) and "BUILD" not in states and len(states) == len(alice.made):
            break
        assert time.monotonic() - start < 300, f"still building: {states}"
        time.sleep(0.5)
    final = [s for s in os_cloud.lease_servers(lease_id) if s.status == "ACTIVE"]
    figure(f"20 racing boots settled ({len(alice.made)} accepted by the API, {len(final)} ACTIVE, "
           f"at most {most} ACTIVE over {polls} polls)", time.monotonic() - start)
    assert 1 <= len(final) <= 2 and most <= 2
    assert all(s.host in TWO_HOSTS for s in final)
    assert len({s.host for s in final}) == len(final)               # one per planned host


def test_placement_gives_the_last_unit_to_one_of_many_racing_claims(admin):
    """What the race above rests on, without Nova: 20 claims at once for the only unit of a
    provider of the test's own. Placement must take one and refuse the others (409); two
    taken would let two servers into a lease's one VM."""
    placement, mv = admin.placement, "1.36"
    rc = f"CUSTOM_GT_ITEST_{uuid.uuid4().hex[:8].upper()}"
    placement.put(f"/resource_classes/{rc}", microversion=mv).raise_for_status()
    rp = placement.post("/resource_providers", json={"name": f"gt-itest-{uuid.uuid4().hex[:8]}"},
                        microversion=mv).json()
    consumers = [str(uuid.uuid4()) for _ in range(20)]
    try:
        placement.post(f"/resource_providers/{rp['uuid']}/inventories", microversion=mv, json={
            "resource_class": rc, "total": 1, "max_unit": 1,
            "resource_provider_generation": rp["generation"]}).raise_for_status()
        conns = [connect("gt-admin", CLOUDS) for _ in consumers]
        for conn in conns:
            conn.authorize()
        go, answers = threading.Barrier(len(consumers)), {}

        def claim(conn, consumer):
            go.wait()
            answers[consumer] = conn.placement.put(f"/allocations/{consumer}", microversion=mv, json={
                "allocations": {rp["uuid"]: {"resources": {rc: 1}}}, "consumer_generation": None,
                "project_id": admin.current_project_id, "user_id": admin.current_user_id}).status_code

        threads = [threading.Thread(target=claim, args=pair) for pair in zip(conns, consumers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        used = placement.get(f"/resource_providers/{rp['uuid']}/usages", microversion=mv).json()["usages"]
        assert sorted(answers.values()).count(204) == 1 and used == {rc: 1}, (sorted(answers.values()), used)
    finally:
        for consumer in consumers:
            placement.delete(f"/allocations/{consumer}", microversion=mv)
        placement.delete(f"/resource_providers/{rp['uuid']}", microversion=mv)
        placement.delete(f"/resource_classes/{rc}", microversion=mv)

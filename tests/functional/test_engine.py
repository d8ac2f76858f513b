"""The engine carries on after a crash and cleans up what nobody owns."""
from __future__ import annotations

from sqlalchemy import select

from gpu_tenancy.cloud.driver import LEASE_TAG, BootRequest
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.failures import FailureClass as F
from tests.conftest import headers


def lease_status(sessions, lease_id):
    with sessions() as s:
        return s.get(m.Lease, lease_id).status


def test_a_restarted_engine_finishes_a_lease_left_part_way(client, runtime, cloud, engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x4", "instances": 2, "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    lifecycle = runtime.engine.lifecycle
    # The engine wrote its intent (provisioning, one server row per VM) and died before booting.
    original = lifecycle.advance
    lifecycle.advance = lambda lease_id: None
    lifecycle.start(lease["id"])
    lifecycle.advance = original
    assert lease_status(runtime.sessions, lease["id"]) == "provisioning"
    assert cloud.servers() == {}
    engine_tick()                 # the next engine picks it up where it was
    engine_tick(advance=30)
    assert lease_status(runtime.sessions, lease["id"]) == "active"
    assert len(cloud.servers()) == 2


def test_a_boot_done_but_not_recorded_is_not_made_twice(client, runtime, cloud, engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    lifecycle = runtime.engine.lifecycle
    lifecycle.advance = lambda lease_id: None
    lifecycle.start(lease["id"])
    with session_scope(runtime.sessions) as s:
        row = s.get(m.Lease, lease["id"])
        host = row.allocations[0].host
    # the boot reached the cloud, then the engine died before writing the server id down
    flavor = _lease_flavor(cloud, runtime, lease["id"], host)
    cloud.boot(BootRequest("ml-vision", lease["id"], 0, host, flavor, cloud.images()[0]["id"],
                           network_id=lease["network"]["id"]))   # as the engine asks
    del lifecycle.advance
    engine_tick()
    engine_tick(advance=30)
    assert lease_status(runtime.sessions, lease["id"]) == "active"
    assert len(cloud.servers()) == 1


def _shape_specs(runtime, name):
    from gpu_tenancy.cloud.driver import ShapeSpec
    with session_scope(runtime.sessions) as s:
        sh = s.get(m.Shape, name)
        yield ShapeSpec(sh.name, sh.gpu_model, sh.gpus, sh.vcpus, sh.ram_mb, sh.disk_gb, sh.pci_alias)


def _lease_flavor(cloud, runtime, lease_id, host, shape="a100.x1"):
    """The lease's class, one unit on `host`, and its flavor, as the engine makes them; the flavor's id."""
    cloud.ensure_lease_class(lease_id)
    cloud.set_lease_inventory(lease_id, {host: 1})
    return cloud.ensure_lease_flavor(lease_id, "ml-vision", next(_shape_specs(runtime, shape))).id


def test_reconcile_deletes_servers_of_finished_or_unknown_leases(runtime, cloud):
    flavor = _lease_flavor(cloud, runtime, "no-such-lease", "gpu-a100-1")
    stray = cloud.boot(BootRequest("ml-vision", "no-such-lease", 0, "gpu-a100-1", flavor, cloud.images()[0]["id"]))
    runtime.engine.lifecycle.reconcile()
    assert stray not in cloud.servers()
    assert "no-such-lease" in cloud.leases_in_cloud()   # its unit is held until the GPUs are released
    runtime.clock.advance(cloud.delete_seconds)
    runtime.engine.lifecycle.reconcile()
    assert cloud.leases_in_cloud() == set() and cloud.lease_inventory() == {} and cloud.flavors() == {}


def test_a_server_the_cloud_will_not_delete_stops_neither_reconcile_nor_the_tick(client, runtime, cloud, engine_tick):
    """Reconcile runs in the tick, before the ends and the plan: one stray server whose delete
    the cloud refuses stopped the rest of the tick each time (a lease past its end ran on)."""
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers()).get_json()
    engine_tick()
    engine_tick(advance=30)
    flavor = _lease_flavor(cloud, runtime, "no-such-lease", "gpu-a100-4")
    stray = cloud.boot(BootRequest("ml-vision", "no-such-lease", 0, "gpu-a100-4", flavor, cloud.images()[0]["id"]))
    cloud.inject_failure("delete_server", F.API_ERROR, times=10_000)
    engine_tick(advance=3600)   # its end, and the hosts' refresh with reconcile, in one tick
    shown = client.get(f"/v1/leases/{lease['lease']['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] in ("ending", "ended"), shown["status"]
    assert stray in cloud.servers()


def test_a_host_that_goes_down_takes_nothing_new(client, runtime, cloud, engine_tick):
    for name in ("gpu-h100-1", "gpu-h100-2"):
        cloud.set_host_state(name, up=False)
    runtime.clock.advance(runtime.config.host_refresh_seconds)
    engine_tick()
    waiting = client.post("/v1/leases", json={"shape": "h100.x1", "duration": "PT1H"},
                          headers=headers()).get_json()["lease"]
    assert waiting["status"] == "queued" and waiting["queue"]["reasons"]   # waits for a host to come back
    cloud.set_host_state("gpu-h100-2", up=True)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    lease = client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]
    assert lease["status"] in ("provisioning", "scheduled", "active")
    assert lease["allocations"][0]["host"] == "gpu-h100-2"
    with session_scope(runtime.sessions) as s:
        assert {h.name for h in s.scalars(select(m.Host).where(m.Host.up.is_(False)))} == {"gpu-h100-1"}


def test_watching_a_boot_asks_the_cloud_only_for_the_server_state(client, runtime, cloud, engine_tick, monkeypatch):
    """Each pass over a booting lease is one server-state call per VM: the flavor and the
    image are looked up once, before the boot (a flavor lookup per poll cost ~100 ms each
    on the loopback cloud, a third of the boot overhead)."""
    calls = []
    for name in ("ensure_lease_class", "set_lease_inventory", "ensure_lease_flavor", "check_image", "boot",
                 "grant_lease_flavor", "server_state"):
        real = getattr(cloud, name)
        monkeypatch.setattr(cloud, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    for _ in range(3):
        runtime.engine.lifecycle.watch()
    assert lease_status(runtime.sessions, lease["id"]) == "provisioning"
    engine_tick(advance=30)
    assert lease_status(runtime.sessions, lease["id"]) == "active"
    assert [c for c in calls if c != "server_state"] == ["ensure_lease_class", "set_lease_inventory",
                                                         "ensure_lease_flavor", "check_image", "boot",
                                                         "grant_lease_flavor"]
    assert calls.count("server_state") >= 4


def test_a_lease_tag_a_tenant_writes_on_its_servers_makes_reconcile_delete_none_of_them(client, runtime, cloud,
                                                                                       engine_tick):
    """A server's metadata is its project's to write: the service's VMs of a lease still running,
    tagged by their tenant with another project's lease that is over or with no lease at all, were
    deleted by the reconcile, as was any server of the tenant's own so tagged (thousands of such
    tags: as many deletes in the tick). A server is a lease's only as the cloud says: booted with
    its flavor, in its project."""
    def ask(project, **body):
        reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", **body},
                            headers=headers(project))
        assert reply.status_code == 201, reply.get_json()
        return reply.get_json()["lease"]["id"]

    finished = ask("nlp-lab")
    engine_tick()
    engine_tick(advance=30)
    assert client.delete(f"/v1/leases/{finished}", headers=headers("nlp-lab")).status_code == 204
    for _ in range(3):
        engine_tick(advance=30)
    assert lease_status(runtime.sessions, finished) == "ended"
    running = ask("ml-vision", instances=2)
    engine_tick()
    engine_tick(advance=30)
    assert lease_status(runtime.sessions, running) == "active"
    vms = sorted(cloud.servers())
    own = cloud.tenant_boot("ml-vision", cloud.add_legacy_flavor("ml-vision", next(_shape_specs(runtime, "a100.x1"))))
    cloud.set_server_metadata(vms[0], {LEASE_TAG: finished})
    cloud.set_server_metadata(vms[1], {LEASE_TAG: "no-such-lease"})
    cloud.set_server_metadata(own, {LEASE_TAG: "no-such-lease"})
    runtime.engine.lifecycle.reconcile()
    assert set(vms) | {own} <= set(cloud.servers())
    engine_tick(advance=runtime.config.host_refresh_seconds)   # and in the tick
    assert set(vms) | {own} <= set(cloud.servers())
    assert lease_status(runtime.sessions, running) == "active"
    with session_scope(runtime.sessions) as s:
        assert {sv.status for sv in s.get(m.Lease, running).servers} == {"ACTIVE"}

"""A lease's network on the simulated cloud (the demo's: `public` external, ml-vision-net
and nlp-lab-net, auto-allocation for any other project): which network each rule
chooses, the 400s that leave nothing made, the addresses and ssh line a lease shows,
floating IPs released at its end and after a crash."""
from __future__ import annotations

import dataclasses
import time

import pytest

from sqlalchemy import func, select

from gpu_tenancy.cloud.driver import NetworkPolicy
from gpu_tenancy.db import models as m
from gpu_tenancy.engine import networking
from tests.conftest import RELEASE, headers

HOUR = 3600


def ask(client, project="ml-vision", expect=201, **body):
    body.setdefault("shape", "a100.x1")
    body.setdefault("duration", "PT1H")
    reply = client.post("/v1/leases", json=body, headers=headers(project))
    assert reply.status_code == expect, reply.get_json()
    return reply.get_json()


def show(client, lease_id, project="ml-vision"):
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]


def refused(client, code, project="ml-vision", **body):
    error = ask(client, project, 400, **body)["errors"][0]
    assert error["code"] == code, error
    return error["detail"]


def nothing_made(sessions, cloud):
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(m.Lease)) == 0
    assert cloud.servers() == {} and cloud.floating_ips() == {} and cloud.security_groups() == {}


def network_id(cloud, name):
    return next(i for i, n in cloud.networks().items() if n["name"] == name)


def give_quota(client, project):
    reply = client.put(f"/v1/quotas/{project}", json={"quota": {"gpu_models": {"A100": {"gpus": 8}}}},
                       headers=headers("admin", roles="admin"))
    assert reply.status_code == 200, reply.get_json()


def run_to_active(client, engine_tick, lease_id, project="ml-vision"):
    engine_tick()
    engine_tick(advance=30)   # the demo cloud boots in 20 s
    lease = show(client, lease_id, project)
    assert lease["status"] == "active", lease
    return lease


# --- which network ------------------------------------------------------------------------------
def test_without_network_the_projects_only_network_is_chosen(client, cloud):
    lease = ask(client)["lease"]
    assert lease["network"] == {"id": network_id(cloud, "ml-vision-net"), "name": "ml-vision-net",
                                "chosen_by": "only"}
    assert lease["floating_ip"] is False


def test_a_network_named_by_name_or_id_is_the_one_asked_for(client, cloud):
    cloud.add_network("shared-net", "10.9.0.0/24", shared=True)
    by_name = ask(client, network="shared-net")["lease"]
    assert by_name["network"] == {"id": network_id(cloud, "shared-net"), "name": "shared-net",
                                  "chosen_by": "request"}
    by_id = ask(client, network=network_id(cloud, "ml-vision-net"))["lease"]
    assert by_id["network"]["name"] == "ml-vision-net" and by_id["network"]["chosen_by"] == "request"


def test_with_two_networks_the_operators_default_is_chosen(client, cloud):
    cloud.add_network("shared-net", "10.9.0.0/24", shared=True)
    cloud.network_policy = NetworkPolicy(default_network="shared-net")
    lease = ask(client)["lease"]
    assert lease["network"] == {"id": network_id(cloud, "shared-net"), "name": "shared-net",
                                "chosen_by": "default"}


def test_with_two_networks_and_no_default_a_400_lists_them_and_nothing_is_made(client, cloud, sessions):
    shared = cloud.add_network("shared-net", "10.9.0.0/24", shared=True)
    detail = refused(client, "gpu_tenancy.network_required")
    assert "ml-vision-net" in detail and "shared-net" in detail and shared in detail
    # a default the project cannot use is no default
    cloud.network_policy = NetworkPolicy(default_network="nlp-lab-net")
    refused(client, "gpu_tenancy.network_required")
    nothing_made(sessions, cloud)


def test_a_project_with_no_network_gets_one_allocated_at_its_first_boot(client, cloud, engine_tick):
    give_quota(client, "astro")
    lease = ask(client, project="astro")["lease"]
    assert lease["network"] == {"id": None, "name": None, "chosen_by": "auto"}
    active = run_to_active(client, engine_tick, lease["id"], "astro")
    [address] = active["servers"][0]["addresses"]
    assert address["network"] == "auto_allocated_network" and address["kind"] == "fixed"
    assert address["ip"].startswith("10.200.0.")
    # the project has a network now: its next lease takes it as its only one
    again = ask(client, project="astro")["lease"]
    assert again["network"]["chosen_by"] == "only" and again["network"]["name"] == "auto_allocated_network"


def test_no_network_and_no_auto_allocation_is_a_400_that_says_so(client, cloud, sessions):
    give_quota(client, "astro")
    cloud._auto_allocate = False
    detail = refused(client, "gpu_tenancy.network_required", project="astro")
    assert "has no network" in detail
    nothing_made(sessions, cloud)


# --- refused at request time, nothing made --------------------------------------------------------
def test_another_projects_private_network_is_refused_at_request_time(client, cloud, sessions):
    for name in ("nlp-lab-net", network_id(cloud, "nlp-lab-net")):
        detail = refused(client, "gpu_tenancy.unknown_network", network=name)
        assert "ml-vision-net" in detail      # what it can use instead
    refused(client, "gpu_tenancy.unknown_network", network="no-such-net")
    nothing_made(sessions, cloud)


def test_the_external_network_is_for_floating_ips_not_for_booting(client, cloud, sessions):
    detail = refused(client, "gpu_tenancy.unknown_network", network="public")
    assert "external" in detail and "floating_ip" in detail
    nothing_made(sessions, cloud)


def test_a_floating_ip_where_the_cloud_has_no_external_network_is_refused(client, cloud, sessions):
    cloud.remove_network("public")
    refused(client, "gpu_tenancy.no_external_network", floating_ip=True)
    nothing_made(sessions, cloud)


def test_a_cloud_without_tenant_networks_refuses_network_and_boots_as_before(client, cloud, engine_tick,
                                                                              monkeypatch):
    monkeypatch.setattr(cloud, "tenant_networks", lambda: False)
    refused(client, "gpu_tenancy.no_networks", network="ml-vision-net")
    refused(client, "gpu_tenancy.no_networks", floating_ip=True)
    lease = ask(client)["lease"]
    assert lease["network"] is None
    active = run_to_active(client, engine_tick, lease["id"])
    assert active["servers"][0]["addresses"] == [] and active["servers"][0]["ssh"] is None
    assert cloud.security_groups() == {}


def test_a_slow_cloud_gives_503_in_bounded_time_and_nothing_is_made(client, cloud, sessions, monkeypatch):
    monkeypatch.setattr(networking, "REQUEST_TIMEOUT", 0.2)
    monkeypatch.setattr(cloud, "project_networks", lambda project_id: time.sleep(3) or [])
    began = time.monotonic()
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers())
    assert reply.status_code == 503 and time.monotonic() - began < 2
    assert "try again" in reply.get_json()["errors"][0]["detail"]
    nothing_made(sessions, cloud)


def test_a_failing_cloud_gives_503_and_nothing_is_made(client, cloud, sessions):
    from gpu_tenancy.domain.failures import FailureClass
    cloud.inject_failure("project_networks", FailureClass.API_ERROR)
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers())
    assert reply.status_code == 503, reply.get_json()
    nothing_made(sessions, cloud)


# --- addresses, ssh, floating IPs ------------------------------------------------------------------
def test_an_active_lease_shows_fixed_and_floating_addresses_and_an_ssh_line(client, cloud, engine_tick):
    cloud.network_policy = NetworkPolicy(ssh_cidrs=("192.0.2.0/24",))
    lease = ask(client, instances=2, floating_ip=True)["lease"]
    assert lease["floating_ip"] is True
    active = run_to_active(client, engine_tick, lease["id"])
    fips = cloud.floating_ips()
    assert len(fips) == 2 and {f["lease_id"] for f in fips.values()} == {lease["id"]}
    for server in active["servers"]:
        fixed = [a for a in server["addresses"] if a["kind"] == "fixed"]
        floating = [a for a in server["addresses"] if a["kind"] == "floating"]
        assert len(fixed) == 1 and fixed[0]["network"] == "ml-vision-net" and fixed[0]["ip"].startswith("10.1.0.")
        assert len(floating) == 1 and floating[0]["ip"].startswith("172.24.4.")
        assert server["ssh"] == f"ssh ubuntu@{floating[0]['ip']}"
        assert {f["ip"] for f in fips.values() if f["server_id"] == server["id"]} == {floating[0]["ip"]}
    # the project's security group: SSH from the operator's CIDRs, and ICMP
    [group] = cloud.security_groups().values()
    assert group["name"] == "gpu-tenancy-ssh"
    assert sorted(map(tuple, group["rules"])) == [("icmp", None, "0.0.0.0/0"), ("tcp", 22, "192.0.2.0/24")]
    # the listing shows the same
    listed = client.get("/v1/leases", headers=headers()).get_json()["leases"][0]
    assert listed["servers"] == active["servers"]


def test_a_network_name_with_controls_reaches_the_events_inert(client, cloud, engine_tick):
    """A project names its Neutron networks as it likes, and the name is told in its lease's
    events ("VM 0: fixed 10.1.0.2 on <name>"), which admins read on the dashboard, in the
    events export and through the API. Before: an OSC 52 escape and a forged event line went
    into them as they were; now each control is written as its escape, the name still there."""
    name = "net\x1b]52;c;cm0gLXJmIH4=\x07\n2026-12-01T08:00:00Z  transition: forged\u202e"
    cloud.add_network(name, "10.7.0.0/24", project="ml-vision")
    lease = ask(client, network=network_id(cloud, name))["lease"]
    run_to_active(client, engine_tick, lease["id"])
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    told = [e["message"] for e in events if " on net" in e["message"]]
    assert told and all(message.isprintable() for message in told), told
    assert told[0].endswith(" on net\\x1b]52;c;cm0gLXJmIH4=\\x07\\n2026-12-01T08:00:00Z  transition: forged\\u202e")
    assert all(e["message"].isprintable() for e in events)


def test_without_a_floating_ip_the_ssh_line_has_the_fixed_ip_and_the_images_login(client, cloud, engine_tick):
    lease = ask(client, image="rocky-9-cuda-12")["lease"]
    active = run_to_active(client, engine_tick, lease["id"])
    [server] = active["servers"]
    [fixed] = server["addresses"]
    assert fixed["kind"] == "fixed" and server["ssh"] == f"ssh rocky@{fixed['ip']}"
    assert cloud.floating_ips() == {}
    [group] = cloud.security_groups().values()
    assert group["rules"] == [["icmp", None, "0.0.0.0/0"]]   # no ssh_cidrs: SSH stays closed


def test_the_security_group_is_made_once_per_project(client, cloud, engine_tick):
    first = ask(client)["lease"]
    second = ask(client)["lease"]
    run_to_active(client, engine_tick, first["id"])
    run_to_active(client, engine_tick, second["id"])
    assert list(cloud.security_groups()) == ["ml-vision"]


def test_floating_ips_are_released_after_the_servers_at_the_end(client, cloud, engine_tick):
    lease = ask(client, floating_ip=True)["lease"]
    run_to_active(client, engine_tick, lease["id"])
    assert len(cloud.floating_ips()) == 1
    assert client.delete(f"/v1/leases/{lease['id']}", headers=headers()).status_code == 204
    engine_tick()                      # the servers' delete
    engine_tick(advance=RELEASE + 1)   # their GPUs released: then the floating IPs
    assert show(client, lease["id"])["status"] == "ended"
    assert cloud.servers() == {} and cloud.floating_ips() == {}


def test_a_failed_release_keeps_the_lease_ending_until_the_cloud_releases_them(client, cloud, engine_tick):
    from gpu_tenancy.domain.failures import FailureClass
    lease = ask(client, floating_ip=True)["lease"]
    run_to_active(client, engine_tick, lease["id"])
    cloud.inject_failure("release_floating_ips", FailureClass.API_ERROR)
    client.delete(f"/v1/leases/{lease['id']}", headers=headers())
    engine_tick()
    engine_tick(advance=RELEASE + 1)
    assert show(client, lease["id"])["status"] == "ending" and len(cloud.floating_ips()) == 1
    engine_tick(advance=1)
    assert show(client, lease["id"])["status"] == "ended" and cloud.floating_ips() == {}


def test_reconcile_releases_floating_ips_of_finished_or_unknown_leases(client, cloud, engine_tick, runtime):
    kept = ask(client, floating_ip=True)["lease"]
    active = run_to_active(client, engine_tick, kept["id"])
    # a crash left a floating IP of a lease the database does not know
    cloud.ensure_floating_ip("lease-lost-in-a-crash", "ml-vision", active["servers"][0]["id"])
    assert cloud.floating_ip_leases() == {kept["id"], "lease-lost-in-a-crash"}
    runtime.engine.lifecycle.reconcile()
    assert cloud.floating_ip_leases() == {kept["id"]}


def test_a_repeated_active_pass_makes_no_second_floating_ip(client, cloud, engine_tick, runtime):
    """A crash after the floating IP was made and before the lease was recorded active: the
    engine's next pass finds the same one."""
    lease = ask(client, floating_ip=True)["lease"]
    engine_tick()
    runtime.clock.advance(30)
    states = {0: cloud.server_state(show(client, lease["id"])["servers"][0]["id"])}
    assert networking.on_active(runtime.engine.lifecycle, lease["id"], states, 30)   # as before the crash
    engine_tick()
    active = show(client, lease["id"])
    assert active["status"] == "active" and len(cloud.floating_ips()) == 1
    assert [a["kind"] for a in active["servers"][0]["addresses"]] == ["fixed", "floating"]


def test_a_vm_booted_again_after_a_retry_takes_the_floating_ip_its_lease_already_has(cloud):
    from gpu_tenancy.cloud.driver import BootRequest, ShapeSpec
    cloud.ensure_lease_class("lease-1")
    cloud.set_lease_inventory("lease-1", {"gpu-a100-1": 1, "gpu-a100-2": 1})
    flavor = cloud.ensure_lease_flavor("lease-1", "ml-vision", ShapeSpec("a100.x1", "A100", 1, 1, 512, 1, "a100")).id
    net = network_id(cloud, "ml-vision-net")
    first = cloud.boot(BootRequest("ml-vision", "lease-1", 0, "gpu-a100-1", flavor, "ubuntu-22.04-cuda-12",
                                   network_id=net))
    ip = cloud.ensure_floating_ip("lease-1", "ml-vision", first)
    cloud.delete_server(first)   # retried elsewhere: its floating IP stays the lease's
    again = cloud.boot(BootRequest("ml-vision", "lease-1", 0, "gpu-a100-2", flavor, "ubuntu-22.04-cuda-12",
                                   network_id=net))
    assert cloud.ensure_floating_ip("lease-1", "ml-vision", again) == ip
    assert [f["server_id"] for f in cloud.floating_ips().values()] == [again]


# --- crashes -----------------------------------------------------------------------------------------
NETWORK_STEPS = ("floating_ip_made", "floating_ips_released")


@pytest.mark.parametrize("step", NETWORK_STEPS)
def test_kill_9_at_each_floating_ip_step_then_restart_leaves_no_floating_ip(tmp_path, db_url, step):
    """The engine killed right after a floating IP was made (before the lease is recorded
    active), or right after they were released (before it is recorded ended): the restarted
    engine finds them again, and nothing is left."""
    import yaml

    from gpu_tenancy.app import create_app
    from gpu_tenancy.clock import SystemClock
    from gpu_tenancy.cloud.simulated import SimulatedCloud
    from gpu_tenancy.config import DEMO_CLOUD, Config
    from gpu_tenancy.db.session import session_scope
    from gpu_tenancy.demo.seed import seed
    from tests.crash_harness import crash_then_restart, write_config

    cloud_config = yaml.safe_load(open(DEMO_CLOUD).read())
    cloud_config.update(boot_seconds=1, delete_seconds=1, state_file=str(tmp_path / "cloud.json"))
    (tmp_path / "cloud.yaml").write_text(yaml.safe_dump(cloud_config))
    config_path = write_config(tmp_path, database_url=db_url, auth_strategy="noauth2", cloud_driver="simulated",
                               simulated_cloud=str(tmp_path / "cloud.yaml"))
    clock = SystemClock()
    cloud = SimulatedCloud.from_file(tmp_path / "cloud.yaml", clock)
    app = create_app(Config.load(str(config_path)), clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, clock.now(), cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    lease = ask(app.test_client(), shape="a100.x4", instances=2, duration="PT6S", floating_ip=True)["lease"]
    try:
        outcome = crash_then_restart(tmp_path, config_path, runtime.sessions, lease["id"], step)
        assert outcome.killed, f"the engine was not killed at {step}: {outcome.engine_logs}"
        assert outcome.final_status == "ended" and outcome.reached_active, outcome.engine_logs
        assert cloud.floating_ips() == {} and cloud.servers() == {}
        [public] = [n for n in cloud.networks().values() if n["name"] == "public"]
        assert public["used"] == 2   # addresses ever taken from it: one per VM, none made twice
    finally:
        runtime.sessions.kw["bind"].dispose()


def test_a_slow_boot_then_a_late_address_still_gets_its_floating_ip(client, cloud, engine_tick, monkeypatch):
    """The address's grace counts from when the VMs are first seen ACTIVE, not from the planned
    start: a VM that took two minutes to boot and shows its address a moment after ACTIVE gets
    its floating IP (it used to go active without one, and nothing said so)."""
    cloud.boot_seconds = 120
    lease = ask(client, floating_ip=True)["lease"]
    real_state, bare = cloud.server_state, []

    def server_state(server_id):   # Neutron's port shows its address a moment after ACTIVE
        state = real_state(server_id)
        if state.status == "ACTIVE" and not bare:
            bare.append(server_id)
            return dataclasses.replace(state, addresses=())
        return state
    monkeypatch.setattr(cloud, "server_state", server_state)
    engine_tick()
    for _ in range(8):
        engine_tick(advance=30)
    active = show(client, lease["id"])
    assert active["status"] == "active" and bare and [a["kind"] for a in active["servers"][0]["addresses"]] == ["fixed", "floating"]
    assert len(cloud.floating_ips()) == 1


def test_a_vm_that_never_shows_an_address_fails_the_lease_that_asked_for_a_floating_ip(client, cloud, engine_tick,
                                                                                       monkeypatch):
    lease = ask(client, floating_ip=True)["lease"]
    real_state = cloud.server_state
    monkeypatch.setattr(cloud, "server_state", lambda server_id: dataclasses.replace(real_state(server_id),
                                                                                     addresses=()))
    engine_tick()
    for _ in range(4):
        engine_tick(advance=30)
    shown = show(client, lease["id"])
    assert shown["failures"] and shown["failures"][0]["class"] == "network", shown["failures"]
    assert "no address" in shown["failures"][0]["message"] and cloud.floating_ips() == {}

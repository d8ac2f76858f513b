"""A lease's network on the loopback cloud's real Neutron (scripts/loopback/README.md,
"Networks"): the service boots tenant-a's VM with a port on tenant-a-net and the
project's security group, GET /v1/leases/{id} shows its fixed IP (and a floating IP
from `public` when asked, released at the end), and tenant-b's network is refused
with 400 when the lease is asked for, nothing made."""
from __future__ import annotations

import ipaddress

import pytest
from sqlalchemy import func, select

from gpu_tenancy.cloud.driver import NetworkPolicy
from gpu_tenancy.cloud.openstack import OpenStackCloud
from gpu_tenancy.cloud.openstack.connection import connect
from gpu_tenancy.db import models as m
from tests.integration.conftest import CLOUDS, auth, tagged_servers
from tests.integration.test_leases_on_openstack import api, create, tick_until  # noqa: F401 (fixture)

SSH_FROM = "192.0.2.0/24"   # TEST-NET-1


@pytest.fixture(scope="module")
def os_cloud(admin, projects):
    """The openstack driver with tenant networks on (os_app boots with it)."""
    # the GPU hosts sit in isolating aggregates (scripts/loopback/configure.sh): flavors ask for the trait
    cloud = OpenStackCloud(connect("gt-service", CLOUDS), resource_classes={},
                           flavor_extra_specs={"trait:CUSTOM_GPU_TENANCY": "required"})
    cloud.network_policy = NetworkPolicy(ssh_cidrs=(SSH_FROM,))
    yield cloud
    for project in projects.values():   # the group is made once per project; the tests' go with them
        for group in admin.network.security_groups(project_id=project, name=cloud.SECURITY_GROUP):
            try:
                admin.network.delete_security_group(group, ignore_missing=True)
            except Exception:   # still on a port another test is deleting: left for the next run
                pass


def ports_of(admin, server_id):
    return list(admin.network.ports(device_id=server_id))


def fips_of(admin, lease_id):
    return [f for f in admin.network.ips() if f"lease {lease_id} " in (f.description or "")]


def test_a_service_booted_lease_gets_a_port_on_the_tenants_network_with_its_fixed_ip_shown(
        os_app, api, tokens, admin, projects, os_cloud):
    alice = tokens["gt-alice"]
    net = admin.network.find_network("tenant-a-net", project_id=projects["tenant-a"], ignore_missing=False)
    lease = create(api, alice, shape="a100.x1")
    assert lease["network"] == {"id": net.id, "name": "tenant-a-net", "chosen_by": "only"}
    active = tick_until(os_app, api, alice, lease["id"], "active")
    [server] = active["servers"]
    [fixed] = server["addresses"]
    assert fixed["network"] == "tenant-a-net" and fixed["kind"] == "fixed"
    assert ipaddress.ip_address(fixed["ip"]) in ipaddress.ip_network("10.1.0.0/24")
    assert server["ssh"] == f"ssh ubuntu@{fixed['ip']}"
    [port] = ports_of(admin, server["id"])
    assert port.network_id == net.id and port.project_id == projects["tenant-a"]
    assert [ip["ip_address"] for ip in port.fixed_ips] == [fixed["ip"]]
    group = admin.network.get_security_group(port.security_group_ids[0])
    assert port.security_group_ids == [group.id] and group.name == "gpu-tenancy-ssh"
    rules = {(r.protocol, r.port_range_min, r.remote_ip_prefix)
             for r in admin.network.security_group_rules(security_group_id=group.id) if r.direction == "ingress"}
    assert rules == {("icmp", None, "0.0.0.0/0"), ("tcp", 22, SSH_FROM)}

    api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice))
    tick_until(os_app, api, alice, lease["id"], "ended")
    assert ports_of(admin, server["id"]) == []


def test_a_floating_ip_when_asked_shown_on_the_lease_and_released_at_its_end(
        os_app, api, tokens, admin, projects):
    alice = tokens["gt-alice"]
    lease = create(api, alice, shape="a100.x1", floating_ip=True)
    active = tick_until(os_app, api, alice, lease["id"], "active")
    [server] = active["servers"]
    floating = [a["ip"] for a in server["addresses"] if a["kind"] == "floating"]
    assert len(floating) == 1 and ipaddress.ip_address(floating[0]) in ipaddress.ip_network("172.24.4.0/24")
    assert server["ssh"] == f"ssh ubuntu@{floating[0]}"
    [fip] = fips_of(admin, lease["id"])
    [port] = ports_of(admin, server["id"])
    assert (fip.floating_ip_address, fip.port_id, fip.project_id) == (floating[0], port.id,
                                                                     projects["tenant-a"])

    api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice))
    tick_until(os_app, api, alice, lease["id"], "ended")
    assert fips_of(admin, lease["id"]) == []


def test_tenant_bs_network_is_refused_with_400_at_request_time_and_nothing_is_made(
        os_app, api, tokens, admin, projects):
    alice = tokens["gt-alice"]
    other = admin.network.find_network("tenant-b-net", project_id=projects["tenant-b"], ignore_missing=False)
    for name in ("tenant-b-net", other.id):
        reply = api.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "network": name},
                         headers=auth(alice))
        assert reply.status_code == 400, reply.get_json()
        error = reply.get_json()["errors"][0]
        assert error["code"] == "gpu_tenancy.unknown_network" and "tenant-a-net" in error["detail"]
    runtime = os_app.extensions["gpu_tenancy"]
    with runtime.sessions() as session:
        assert session.scalar(select(func.count()).select_from(m.Lease)) == 0
    runtime.engine.run_once()
    assert tagged_servers(admin) == []


def test_a_network_shared_with_tenant_a_alone_is_one_its_lease_may_name(os_app, api, tokens, admin, projects):
    """An RBAC share to tenant-a only: Neutron shows the service user `shared: false` for it,
    yet tenant-a boots on it; the lease naming it is taken, and its VM gets a port there."""
    alice = tokens["gt-alice"]
    lab = admin.network.create_network(name="gt-rbac-lab-net", project_id=projects["tenant-b"])
    admin.network.create_subnet(network_id=lab.id, ip_version=4, cidr="10.77.0.0/24", project_id=projects["tenant-b"])
    share = admin.network.create_rbac_policy(object_type="network", object_id=lab.id, action="access_as_shared",
                                             target_project_id=projects["tenant-a"])
    lease = None
    try:
        lease = create(api, alice, shape="a100.x1", network="gt-rbac-lab-net")
        assert lease["network"] == {"id": lab.id, "name": "gt-rbac-lab-net", "chosen_by": "request"}
        active = tick_until(os_app, api, alice, lease["id"], "active")
        [port] = ports_of(admin, active["servers"][0]["id"])
        assert port.network_id == lab.id
    finally:
        if lease is not None:
            api.delete(f"/v1/leases/{lease['id']}", headers=auth(alice))
            tick_until(os_app, api, alice, lease["id"], "ended")
        admin.network.delete_rbac_policy(share, ignore_missing=True)
        admin.network.delete_network(lab, ignore_missing=True)

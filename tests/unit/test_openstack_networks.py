"""The openstack driver's networks a project can use (cloud/openstack/networks.py), against a
stand-in of openstacksdk's network proxy that answers as Neutron answers the service user:
`shared` as the caller sees it, from the network's RBAC policies."""
from __future__ import annotations

from types import SimpleNamespace

from gpu_tenancy.cloud.openstack.networks import OpenStackNetworks

SERVICE, TENANT, OTHER = "service-project", "tenant-a", "tenant-b"


def network(net_id, owner, external=False):
    return SimpleNamespace(id=net_id, name=net_id, project_id=owner, is_router_external=external)


class Neutron:
    """Networks and their access_as_shared RBAC policies (target project, or * for all)."""

    def __init__(self, networks, shares):
        self.by_id, self.shares = {n.id: n for n in networks}, shares   # shares: (network id, target)

    def _shared_to_caller(self, net_id):
        return any(n == net_id and target in ("*", SERVICE) for n, target in self.shares)

    def networks(self, project_id=None, is_shared=None, is_router_external=None):
        for n in self.by_id.values():
            seen = SimpleNamespace(**vars(n), is_shared=self._shared_to_caller(n.id))
            if ((project_id is None or n.project_id == project_id)
                    and (is_shared is None or seen.is_shared == is_shared)
                    and (is_router_external is None or n.is_router_external == is_router_external)):
                yield seen

    def rbac_policies(self, object_type, action, target_project_id):
        assert (object_type, action) == ("network", "access_as_shared")
        return [SimpleNamespace(object_id=n, target_project_id=t) for n, t in self.shares if t == target_project_id]

    def find_network(self, net_id, ignore_missing=True):
        n = self.by_id.get(net_id)
        return n and SimpleNamespace(**vars(n), is_shared=self._shared_to_caller(n.id))


def usable(neutron, project):
    driver = object.__new__(OpenStackNetworks)
    driver.admin = SimpleNamespace(network=neutron)
    return {n.name: n.shared for n in driver.project_networks(project)
            if n.project_id == project or n.shared}


def test_a_network_shared_with_the_project_alone_is_one_it_can_use():
    # an RBAC share to tenant-a only: Neutron tells the service user shared=False, and the lease
    # naming it was refused with "not a network project tenant-a can use"
    neutron = Neutron([network("own", TENANT), network("lab-net", OTHER), network("public", "admin", True)],
                      [("lab-net", TENANT)])
    assert usable(neutron, TENANT) == {"own": False, "lab-net": True}
    assert usable(neutron, OTHER) == {"lab-net": False}


def test_a_network_shared_with_the_services_project_alone_is_not_every_projects():
    # shared=True to the service user only: it was every project's, chosen as a project's only
    # network, and the boot in the project then failed
    neutron = Neutron([network("ops-net", "admin"), network("everyone", "admin")],
                      [("ops-net", SERVICE), ("everyone", "*")])
    assert usable(neutron, TENANT) == {"everyone": True}


class FloatingIps:
    """Floating IPs as the service user (an admin) sees them: every project's; it may bind any to any port."""

    def __init__(self, ips):
        self.by_id = {f.id: f for f in ips}
        self.made = []

    def ports(self, device_id):
        return [SimpleNamespace(id=f"port-of-{device_id}")]

    def ips(self, project_id=None, description=None):
        return [f for f in self.by_id.values() if (project_id is None or f.project_id == project_id)
                and (description is None or f.description == description)]

    def update_ip(self, fip, **attrs):
        for key, value in attrs.items():
            setattr(fip, key, value)
        return fip

    def networks(self, is_router_external=None):
        return [SimpleNamespace(id="public", name="public", is_default=True)]

    def create_ip(self, floating_network_id, port_id, project_id, description):
        fip = SimpleNamespace(id=f"new-{len(self.made)}", floating_ip_address=f"203.0.113.{100 + len(self.made)}",
                              project_id=project_id, port_id=port_id, description=description)
        self.made.append(fip)
        self.by_id[fip.id] = fip
        return fip


def test_a_floating_ip_of_another_project_naming_the_lease_is_never_put_on_its_vm():
    # tenant-b made a floating IP of its own, unbound, described as one of tenant-a's lease: the
    # service user bound it to tenant-a's VM, so that tenant-b held the address tenant-a was told to
    # ssh to (and could move it to a VM of its own), and saw the VM's port and fixed address
    planted = SimpleNamespace(id="planted", floating_ip_address="198.51.100.66", project_id=OTHER, port_id=None,
                              description="gpu-tenancy lease lease-1 server old")
    leftover = SimpleNamespace(id="leftover", floating_ip_address="203.0.113.5", project_id=TENANT, port_id=None,
                               description="gpu-tenancy lease lease-1 server gone")
    for ips, expected in (([planted], "203.0.113.100"), ([planted, leftover], "203.0.113.5")):
        neutron = FloatingIps(ips)
        driver = object.__new__(OpenStackNetworks)
        driver.admin = SimpleNamespace(network=neutron)
        assert driver.ensure_floating_ip("lease-1", TENANT, "server-1") == expected
        assert (planted.port_id, planted.description) == (None, "gpu-tenancy lease lease-1 server old")
        assert all(f.project_id == TENANT for f in neutron.by_id.values() if f.port_id == "port-of-server-1")

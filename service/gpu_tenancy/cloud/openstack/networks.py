"""The openstack driver's networks, with Neutron through openstacksdk (mixed into
OpenStackCloud, which uses its `admin` connection and `network` option).

- A project can use its own networks and shared ones; external ones
  (router:external) give floating IPs.
- The security group `gpu-tenancy-ssh` is made in the tenant's project, once:
  ICMP from anywhere, SSH (tcp 22) from each of the operator's `ssh_cidrs`
  (none: SSH stays closed). Neutron gives a new group its egress rules.
- A floating IP is made in the tenant's project on the server's port, its
  description naming the lease and the server ("gpu-tenancy lease <id> server
  <id>"): that is how it is found again after a crash and released at the end.
"""
from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import Address, CloudError, NetworkInfo
from gpu_tenancy.cloud.openstack.errors import CALL_ERRORS, wrap
from gpu_tenancy.domain.failures import FailureClass

if TYPE_CHECKING:
    from gpu_tenancy.cloud.driver import NetworkPolicy

F = FailureClass
FIP_DESCRIPTION = "gpu-tenancy lease {lease} server {server}"
FIP_LEASE = re.compile(r"^gpu-tenancy lease (\S+) server ")


class OpenStackNetworks:
    if TYPE_CHECKING:   # what OpenStackCloud provides
        network: str
        SECURITY_GROUP: str
        network_policy: NetworkPolicy

        @property
        def admin(self) -> Any: ...

    def tenant_networks(self) -> bool:
        return self.network != "none"   # the operator's "none": VMs get no network

    def project_networks(self, project_id: str) -> list[NetworkInfo]:
        net = self.admin.network
        try:
            # Neutron says `shared` of a network as the caller sees it (an RBAC share to the caller's
            # project or to all): to the service user, a network shared with the tenant alone looks
            # private, and one shared with the service's project alone looks shared. So whom a
            # network is shared with is read from its RBAC policies, for this project.
            shared = {p.object_id for target in ("*", project_id)
                      for p in net.rbac_policies(object_type="network", action="access_as_shared",
                                                 target_project_id=target)}
            found = {n.id: n for query in ({"project_id": project_id}, {"is_router_external": True})
                     for n in net.networks(**query)}
            for network_id in sorted(shared - set(found)):
                network = net.find_network(network_id, ignore_missing=True)
                if network is not None:
                    found[network.id] = network
        except CALL_ERRORS as exc:
            raise wrap(exc, f"listing the networks of project {project_id} failed", F.NETWORK) from exc
        return [NetworkInfo(n.id, n.name or n.id, n.project_id, n.id in shared, bool(n.is_router_external))
                for n in sorted(found.values(), key=lambda n: (n.name or "", n.id))]

    def auto_allocation(self) -> bool:
        """Neutron's auto-allocated topology: its extension, and a default external network."""
        net = self.admin.network
        try:
            return (net.find_extension("auto-allocated-topology", ignore_missing=True) is not None
                    and any(n.is_default for n in net.networks(is_router_external=True)))
        except CALL_ERRORS as exc:
            raise wrap(exc, "asking Neutron about auto-allocated topology failed", F.NETWORK) from exc

    def ensure_security_group(self, project_id: str) -> str:
        net = self.admin.network
        try:
            group = next(iter(net.security_groups(project_id=project_id, name=self.SECURITY_GROUP)), None)
            if group is None:
                group = net.create_security_group(
                    name=self.SECURITY_GROUP, project_id=project_id,
                    description="gpu-tenancy: SSH from the operator's networks, and ICMP, into leased VMs")
            have = {(r.protocol, r.port_range_min, r.remote_ip_prefix, r.ether_type)
                    for r in net.security_group_rules(security_group_id=group.id) if r.direction == "ingress"}
            wanted: list[tuple[str, int | None, str, str]] = [("icmp", None, "0.0.0.0/0", "IPv4")] + [
                ("tcp", 22, cidr, f"IPv{ipaddress.ip_network(cidr).version}")
                for cidr in self.network_policy.ssh_cidrs]
            for protocol, port, cidr, ether_type in wanted:
                if (protocol, port, cidr, ether_type) in have:
                    continue
                try:
                    net.create_security_group_rule(
                        security_group_id=group.id, project_id=project_id, direction="ingress",
                        protocol=protocol, port_range_min=port, port_range_max=port,
                        remote_ip_prefix=cidr, ether_type=ether_type)
                except sdk.ConflictException:
                    pass   # made meanwhile: the same rule
            return group.id
        except CALL_ERRORS as exc:
            raise wrap(exc, f"making the security group of project {project_id} failed", F.NETWORK) from exc

    def ensure_floating_ip(self, lease_id: str, project_id: str, server_id: str) -> str:
        net = self.admin.network
        description = FIP_DESCRIPTION.format(lease=lease_id, server=server_id)
        try:
            port = next(iter(net.ports(device_id=server_id)), None)
            if port is None:
                raise CloudError(F.NETWORK, f"server {server_id} has no port for a floating IP",
                                 f"No port found for device {server_id}")
            fip = next(iter(net.ips(project_id=project_id, description=description)), None)
            if fip is None:   # one of the lease's left by a VM deleted for a retry: it serves this VM now
                # (of the lease's project only: any project can describe a floating IP of its own so,
                # and the service user would bind it to this VM's port)
                fip = next((f for _, f in self._lease_ips(lease_id) if not f.port_id and f.project_id == project_id),
                           None)
                if fip is not None:
                    fip = net.update_ip(fip, port_id=port.id, description=description)
            if fip is None:
                external = self._external_network()
                fip = net.create_ip(floating_network_id=external.id, port_id=port.id, project_id=project_id,
                                    description=description)
            elif fip.port_id != port.id:
                fip = net.update_ip(fip, port_id=port.id)
            return fip.floating_ip_address
        except CALL_ERRORS as exc:
            raise wrap(exc, f"making a floating IP for server {server_id} failed", F.NETWORK) from exc

    def _external_network(self):
        externals = sorted(self.admin.network.networks(is_router_external=True),
                           key=lambda n: (not n.is_default, n.name or "", n.id))
        if not externals:
            raise CloudError(F.NETWORK, "the cloud has no external network for floating IPs",
                             "No network with router:external=True")
        return externals[0]

    def _lease_ips(self, lease_id: str | None = None):
        for fip in self.admin.network.ips():
            match = FIP_LEASE.match(fip.description or "")
            if match and lease_id in (None, match.group(1)):
                yield match.group(1), fip

    def release_floating_ips(self, lease_id: str) -> None:
        try:
            for _, fip in list(self._lease_ips(lease_id)):
                self.admin.network.delete_ip(fip, ignore_missing=True)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"releasing the floating IPs of lease {lease_id} failed", F.NETWORK) from exc

    def floating_ip_leases(self) -> set[str]:
        try:
            return {lease_id for lease_id, _ in self._lease_ips()}
        except CALL_ERRORS as exc:
            raise wrap(exc, "listing the service's floating IPs failed", F.NETWORK) from exc

    def image_login_user(self, image_ref: str) -> str | None:
        try:
            image = self.admin.image.find_image(image_ref, ignore_missing=True)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"looking up image {image_ref!r} failed", F.IMAGE) from exc
        return (image.os_admin_user or (image.properties or {}).get("os_admin_user")) if image else None

    # --- used by OpenStackCloud ----------------------------------------------------------------
    def _boot_networks(self, request) -> dict:
        """create_server's networks and security groups for the request."""
        attrs: dict[str, Any] = {"networks": self.network}
        if request.network_id == "auto":
            attrs["networks"] = "auto"
        elif request.network_id:
            attrs["networks"] = [{"uuid": request.network_id}]
        if request.security_group:
            attrs["security_groups"] = [{"name": request.security_group}]   # Nova takes an id here too
        return attrs

    @staticmethod
    def _addresses(server) -> tuple[Address, ...]:
        return tuple(Address(network, entry.get("addr"), entry.get("OS-EXT-IPS:type", "fixed"))
                     for network, entries in sorted((server.addresses or {}).items())
                     for entry in entries if entry.get("addr"))

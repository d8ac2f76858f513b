"""The simulated cloud's networks: what Neutron does at the CloudDriver boundary.

Config (beside the simulated cloud's hosts; without `networks` the cloud has no
tenant networks and VMs boot as they always did, with no address):

    networks:
      - {name: public, external: true, cidr: 172.24.4.0/24}       # floating IPs come from it
      - {name: ml-vision-net, project: ml-vision, cidr: 10.1.0.0/24}
      - {name: shared-net, shared: true, cidr: 10.9.0.0/24}        # every project may boot on it
    auto_allocate: true   # a project with no network gets one on its first boot (networks="auto")

Each network may give its `id` (else one is made from its name, stable across
restarts). A VM gets the next free address of its network's subnet; a floating IP
the next of the external one's. Another project's private network is refused at
boot in Nova's words, as Nova refuses it. The security group keeps its rules as
data (`security_groups()`), for tests to read.
"""
from __future__ import annotations

import ipaddress
import uuid
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from gpu_tenancy.cloud.driver import Address, CloudError, NetworkInfo
from gpu_tenancy.domain.failures import FailureClass

if TYPE_CHECKING:
    from gpu_tenancy.cloud.driver import NetworkPolicy
    from gpu_tenancy.cloud.simulated import _Server

F = FailureClass
AUTO_NETWORK = "auto_allocated_network"   # Neutron's name for it
AUTO_CIDRS = "10.200.0.0/16"              # /24s of auto-allocated networks come from here (reused past 256)


class SimulatedNetworks:
    """Mixed into SimulatedCloud: uses its lock, clock, _servers and _maybe_fail."""

    if TYPE_CHECKING:   # what SimulatedCloud provides
        SECURITY_GROUP: str
        network_policy: NetworkPolicy
        _lock: AbstractContextManager[Any]
        _servers: dict[str, _Server]
        _images: list[dict]

        def _maybe_fail(self, operation: str) -> None: ...

    def _init_networks(self, config: dict) -> None:
        self._networking = "networks" in config
        self._auto_allocate = bool(config.get("auto_allocate", False))
        self._networks: dict[str, dict] = {}
        for entry in config.get("networks") or []:
            net_id = entry.get("id") or str(uuid.uuid5(uuid.NAMESPACE_URL, f"gt-sim-net:{entry['name']}"))
            self._networks[net_id] = dict(id=net_id, name=entry["name"], project_id=entry.get("project"),
                                          shared=bool(entry.get("shared", False)),
                                          external=bool(entry.get("external", False)),
                                          cidr=str(ipaddress.ip_network(entry["cidr"])), used=0)
        self._groups: dict[str, dict] = {}   # project id -> its security group
        self._fips: dict[str, dict] = {}     # floating IP id -> ip, project, lease, server

    def _dump_networks(self) -> dict:
        return {"networks": self._networks, "groups": self._groups, "fips": self._fips}

    def _load_networks(self, state: dict) -> None:
        if state:
            self._networks, self._groups, self._fips = state["networks"], state["groups"], state["fips"]

    # --- test hooks and views ---------------------------------------------------------------
    def add_network(self, name: str, cidr: str, project: str | None = None, shared: bool = False,
                    external: bool = False) -> str:
        with self._lock:
            self._networking = True
            net_id = str(uuid.uuid4())
            self._networks[net_id] = dict(id=net_id, name=name, project_id=project, shared=shared,
                                          external=external, cidr=str(ipaddress.ip_network(cidr)), used=0)
            return net_id

    def remove_network(self, name: str) -> None:
        with self._lock:
            self._networks = {i: n for i, n in self._networks.items() if n["name"] != name}

    def networks(self) -> dict[str, dict]:
        with self._lock:
            return {i: dict(n) for i, n in self._networks.items()}

    def floating_ips(self) -> dict[str, dict]:
        with self._lock:
            return {i: dict(f) for i, f in self._fips.items()}

    def security_groups(self) -> dict[str, dict]:
        with self._lock:
            return {p: dict(g, rules=list(g["rules"])) for p, g in self._groups.items()}

    # --- the driver -------------------------------------------------------------------------
    def tenant_networks(self) -> bool:
        return self._networking

    def auto_allocation(self) -> bool:
        return self._networking and self._auto_allocate

    def project_networks(self, project_id: str) -> list[NetworkInfo]:
        with self._lock:
            self._maybe_fail("project_networks")
            return [NetworkInfo(n["id"], n["name"], n["project_id"], n["shared"], n["external"])
                    for n in self._networks.values()
                    if n["project_id"] == project_id or n["shared"] or n["external"]]

    def ensure_security_group(self, project_id: str) -> str:
        with self._lock:
            self._maybe_fail("ensure_security_group")
            group = self._groups.setdefault(project_id, dict(id=str(uuid.uuid4()), name=self.SECURITY_GROUP,
                                                             rules=[["icmp", None, "0.0.0.0/0"]]))
            for cidr in self.network_policy.ssh_cidrs:
                if ["tcp", 22, cidr] not in group["rules"]:
                    group["rules"].append(["tcp", 22, cidr])
            return group["id"]

    def ensure_floating_ip(self, lease_id: str, project_id: str, server_id: str) -> str:
        with self._lock:
            self._maybe_fail("ensure_floating_ip")
            for fip in self._fips.values():
                if (fip["lease_id"], fip["server_id"]) == (lease_id, server_id):
                    return fip["ip"]
            server = self._servers.get(server_id)
            if server is None or server.deleted_at is not None or not server.fixed_ip:
                raise CloudError(F.NETWORK, f"server {server_id} has no port for a floating IP",
                                 f"Port for instance {server_id} could not be found.")
            external = next((n for n in self._networks.values() if n["external"]), None)
            if external is None:
                raise CloudError(F.NETWORK, "the cloud has no external network for floating IPs",
                                 "Unable to find any external network.")
            for fip in self._fips.values():   # one of the lease's left by a VM deleted for a retry
                old = self._servers.get(fip["server_id"])
                if fip["lease_id"] == lease_id and (old is None or old.deleted_at is not None):
                    fip["server_id"] = server_id
                    return fip["ip"]
            fip_id = str(uuid.uuid4())
            self._fips[fip_id] = dict(ip=self._next_ip(external), project_id=project_id, lease_id=lease_id,
                                      server_id=server_id, network=external["name"])
            return self._fips[fip_id]["ip"]

    def release_floating_ips(self, lease_id: str) -> None:
        with self._lock:
            self._maybe_fail("release_floating_ips")
            for fip_id in [i for i, f in self._fips.items() if f["lease_id"] == lease_id]:
                del self._fips[fip_id]

    def floating_ip_leases(self) -> set[str]:
        with self._lock:
            return {f["lease_id"] for f in self._fips.values()}

    def image_login_user(self, image_ref: str) -> str | None:
        with self._lock:
            image = next((i for i in self._images if image_ref in (i.get("id"), i.get("name"))), None)
            return (image or {}).get("os_admin_user")

    # --- used by SimulatedCloud (with its lock held) ------------------------------------------
    def _plug(self, server, network_id: str | None) -> None:
        """Give a new server its port on the lease's network, as Nova and Neutron would."""
        if not self._networking or network_id is None:
            return
        network: dict | None
        if network_id == "auto":
            network = self._auto_network(server.project_id)
        else:
            network = self._networks.get(network_id)
            if network is None or not (network["project_id"] == server.project_id or network["shared"]):
                raise CloudError(F.NETWORK, f"network {network_id} is not one the project can use",
                                 f"Network {network_id} could not be found. (HTTP 400)")
        server.network_id, server.fixed_ip = network["id"], self._next_ip(network)

    def _addresses(self, server) -> tuple[Address, ...]:
        if not server.fixed_ip:
            return ()
        name = self._networks[server.network_id]["name"]
        return (Address(name, server.fixed_ip, "fixed"),) + tuple(
            Address(name, f["ip"], "floating") for f in self._fips.values() if f["server_id"] == server.id)

    def _auto_network(self, project_id: str) -> dict:
        for network in self._networks.values():
            if network["project_id"] == project_id and network["name"] == AUTO_NETWORK:
                return network
        if not self.auto_allocation():
            raise CloudError(F.NETWORK, "the cloud cannot allocate a network for the project",
                             "Unable to automatically allocate a network for project (HTTP 409)")
        taken = sum(1 for n in self._networks.values() if n["name"] == AUTO_NETWORK)
        pool = ipaddress.ip_network(AUTO_CIDRS)
        cidr = ipaddress.ip_network((int(pool.network_address) + 256 * (taken % (pool.num_addresses // 256)), 24))
        net_id = str(uuid.uuid4())
        self._networks[net_id] = dict(id=net_id, name=AUTO_NETWORK, project_id=project_id, shared=False,
                                      external=False, cidr=str(cidr), used=0)
        return self._networks[net_id]

    @staticmethod
    def _next_ip(network: dict) -> str:
        """The next address of the subnet (.1 is the router's, as a Neutron subnet's gateway);
        past the last one, from the first again (a simulation keeps no port forever)."""
        network["used"] += 1
        subnet = ipaddress.ip_network(network["cidr"])
        usable = subnet.num_addresses - 3      # no network address, gateway or broadcast
        return str(subnet.network_address + 2 + (network["used"] - 1) % usable)

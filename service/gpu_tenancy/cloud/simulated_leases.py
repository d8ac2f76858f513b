"""The simulated cloud's per-lease flavors and resource classes (issue 17), as
Placement and Nova enforce them: a mixin of SimulatedCloud, working on its state
under its lock.

- A lease's class is a name in `_lease_classes`; its inventory is `_lease_inventory`
  (lease id -> host -> units), as on a provider of the service's own under each
  compute node. Placement refuses inventory of a class it does not know, and
  refuses to delete a class that still has inventory.
- Its flavor is in `_flavors` with `lease_id`, the owning project and an access
  list; the flavor asks for one unit of the class. A server booted with it holds
  one unit on its host as long as it holds its GPUs (from the claim at boot until
  its delete is released), so a boot finds a unit free only within the lease's
  VMs on the lease's hosts.
- The tenant boots as a project member would (`tenant_boot`): the flavor must be
  accessible to the project (Nova's private flavors), and the scheduler picks a
  host with a unit and the GPUs free, else the server goes ERROR, no valid host.
"""
from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from gpu_tenancy.cloud.driver import (
    CloudError, LeaseFlavor, ServerFlavor, ServerState, ShapeSpec, lease_flavor_name, lease_resource_class)
from gpu_tenancy.domain.failures import FailureClass as F

if TYPE_CHECKING:
    from gpu_tenancy.cloud.driver import HostInfo
    from gpu_tenancy.cloud.simulated import _Server

NO_VALID_HOST = "No valid host was found. There are not enough hosts available."
PLAIN_FLAVOR = "m1-small"   # the id of a public flavor without GPUs (not one of flavors(): none is asked of it)


class LeaseFlavors:
    """Mixin: needs SimulatedCloud's _lock, _flavors, _servers, _hosts, clock, _holds, _fits."""

    if TYPE_CHECKING:   # what SimulatedCloud provides
        clock: Any
        _lock: AbstractContextManager[Any]
        _flavors: dict[str, dict]
        _servers: dict[str, _Server]
        _hosts: dict[str, HostInfo]
        _lease_classes: list[str]
        _lease_inventory: dict[str, dict[str, int]]

        def _maybe_fail(self, operation: str) -> None: ...
        def _fits(self, host_name: str, flavor: dict, now: int) -> bool: ...
        def _holds(self, server: _Server, now: int) -> bool: ...
        def _status(self, server: _Server, now: int) -> str: ...
        def _fault(self, server: _Server, now: int) -> str | None: ...
        def _server_flavor(self, server: _Server) -> ServerFlavor: ...
        def _flavor_lease(self, server: _Server) -> str | None: ...

    # --- test hooks -------------------------------------------------------------------------
    def tenant_boot(self, project_id: str, flavor_id: str, name: str | None = None) -> str:
        """Boot as a member of `project_id` would: no host given, the flavor must be one the
        project can see; returns the server id (ERROR, no valid host, when no unit is free)."""
        from gpu_tenancy.cloud.simulated import _Server, embed
        with self._lock:
            flavor = self._flavors.get(flavor_id)
            if flavor is None or not self._accessible(flavor, project_id):
                raise CloudError(F.FORBIDDEN, f"flavor {flavor_id} is not available to project {project_id}",
                                 f"Flavor {flavor_id} could not be found. (HTTP 400)")
            now = self.clock.now()
            host = next((h for h in sorted(self._hosts) if self._fits(h, flavor, now)), None)
            server = _Server(str(uuid.uuid4()), project_id, flavor.get("lease_id") or "", None, host or "",
                             flavor_id, "", name or f"tenant-{uuid.uuid4().hex[:6]}", now, 0,
                             tagged=False, lease_unit=bool(flavor.get("lease_id")), embedded=embed(flavor_id, flavor))
            if host is None:
                server.fault, server.host = NO_VALID_HOST, None
            else:
                server.gpus = flavor["gpus"]
            self._servers[server.id] = server
            return server.id

    def lease_inventory(self) -> dict[str, dict[str, int]]:
        """lease id -> host -> units, as Placement shows the lease's class."""
        with self._lock:
            return {lease: dict(hosts) for lease, hosts in self._lease_inventory.items() if hosts}

    def lease_classes(self) -> set[str]:
        with self._lock:
            return {lease_resource_class(lease) for lease in self._lease_classes}

    def add_legacy_flavor(self, project_id: str, shape: ShapeSpec) -> str:
        """A per-project flavor of the first wave (gt-<shape>-<project>), as an older
        version of the service left it, with the project's access."""
        with self._lock:
            fid = str(uuid.uuid4())
            self._flavors[fid] = dict(name=f"gt-{shape.name}-{project_id[:8]}", project_id=project_id,
                                      shape=shape.name, vcpus=shape.vcpus, ram_mb=shape.ram_mb,
                                      disk_gb=shape.disk_gb, gpus=shape.gpus, pci_alias=shape.pci_alias,
                                      extra_specs={"pci_passthrough:alias": f"{shape.pci_alias}:{shape.gpus}"},
                                      is_public=False, access=[project_id])
            return fid

    # --- the driver -------------------------------------------------------------------------
    def ensure_lease_class(self, lease_id: str) -> str:
        with self._lock:
            self._maybe_fail("ensure_lease_class")
            if lease_id not in self._lease_classes:
                self._lease_classes.append(lease_id)
            return lease_resource_class(lease_id)

    def set_lease_inventory(self, lease_id: str, vms_per_host: dict[str, int]) -> None:
        with self._lock:
            self._maybe_fail("set_lease_inventory")
            if lease_id not in self._lease_classes:
                raise CloudError(F.API_ERROR, f"resource class of lease {lease_id} does not exist",
                                 f"No such resource class {lease_resource_class(lease_id)}. (HTTP 400)")
            unknown = sorted(set(vms_per_host) - set(self._hosts))
            if unknown:
                raise CloudError(F.API_ERROR, f"no resource provider for host(s) {', '.join(unknown)}",
                                 "No resource provider with uuid found (HTTP 404)")
            self._lease_inventory[lease_id] = {h: int(n) for h, n in vms_per_host.items() if int(n) > 0}

    def ensure_lease_flavor(self, lease_id: str, project_id: str, shape: ShapeSpec) -> LeaseFlavor:
        with self._lock:
            self._maybe_fail("ensure_lease_flavor")
            rc = lease_resource_class(lease_id)
            for fid, flavor in self._flavors.items():
                if flavor.get("lease_id") == lease_id:
                    return LeaseFlavor(fid, flavor["name"], rc)
            fid = str(uuid.uuid4())
            self._flavors[fid] = dict(
                name=lease_flavor_name(lease_id), lease_id=lease_id, project_id=project_id, shape=shape.name,
                vcpus=shape.vcpus, ram_mb=shape.ram_mb, disk_gb=shape.disk_gb, gpus=shape.gpus,
                pci_alias=shape.pci_alias, is_public=False, access=[],
                extra_specs={"pci_passthrough:alias": f"{shape.pci_alias}:{shape.gpus}", f"resources:{rc}": "1"})
            return LeaseFlavor(fid, lease_flavor_name(lease_id), rc)

    def grant_lease_flavor(self, lease_id: str, project_id: str) -> None:
        with self._lock:
            self._maybe_fail("grant_lease_flavor")
            flavor = self._lease_flavor(lease_id)
            if flavor is None:
                raise CloudError(F.API_ERROR, f"lease {lease_id} has no flavor to grant",
                                 f"Flavor {lease_flavor_name(lease_id)} could not be found.")
            if project_id not in flavor["access"]:
                flavor["access"].append(project_id)

    def revoke_lease_flavor(self, lease_id: str, project_id: str) -> None:
        with self._lock:
            self._maybe_fail("revoke_lease_flavor")
            flavor = self._lease_flavor(lease_id)
            if flavor is not None and project_id in flavor["access"]:
                flavor["access"].remove(project_id)

    def lease_servers(self, lease_id: str) -> list[ServerState]:
        with self._lock:
            now = self.clock.now()
            return [ServerState(s.id, self._status(s, now), s.host, self._fault(s, now),
                                "spawning" if self._status(s, now) == "BUILD" else None, s.name, s.project_id,
                                flavor=self._server_flavor(s))
                    for s in self._servers.values()
                    if s.deleted_at is None and self._flavor_lease(s) == lease_id]

    def remove_lease_inventory(self, lease_id: str) -> bool:
        with self._lock:
            self._maybe_fail("remove_lease_inventory")
            now = self.clock.now()
            busy = {s.host for s in self._servers.values()
                    if s.lease_id == lease_id and s.lease_unit and self._holds(s, now)}
            kept = {h: n for h, n in self._lease_inventory.get(lease_id, {}).items() if h in busy}
            if kept:
                self._lease_inventory[lease_id] = kept
            else:
                self._lease_inventory.pop(lease_id, None)
            return not busy

    def remove_lease_flavor(self, lease_id: str) -> None:
        with self._lock:
            self._maybe_fail("remove_lease_flavor")
            for fid in [fid for fid, f in self._flavors.items() if f.get("lease_id") == lease_id]:
                del self._flavors[fid]

    def remove_lease_class(self, lease_id: str) -> None:
        with self._lock:
            self._maybe_fail("remove_lease_class")
            if self._lease_inventory.get(lease_id):
                raise CloudError(F.API_ERROR, f"resource class of lease {lease_id} still has inventory",
                                 f"Unable to delete resource class {lease_resource_class(lease_id)}. "
                                 "Class is in use in inventory (HTTP 409)")
            if lease_id in self._lease_classes:
                self._lease_classes.remove(lease_id)

    def leases_in_cloud(self) -> set[str]:
        with self._lock:
            return (set(self._lease_classes) | {lease for lease, hosts in self._lease_inventory.items() if hosts}
                    | {f["lease_id"] for f in self._flavors.values() if f.get("lease_id")})

    # --- internals (with the lock held) -----------------------------------------------------
    def _lease_flavor(self, lease_id: str) -> dict | None:
        return next((f for f in self._flavors.values() if f.get("lease_id") == lease_id), None)

    @staticmethod
    def _accessible(flavor: dict, project_id: str) -> bool:
        if "access" not in flavor:   # kept from before access lists: its own project's
            return flavor.get("project_id") == project_id
        return bool(flavor.get("is_public")) or project_id in flavor["access"]

    def _unit_free(self, lease_id: str, host: str, now: int) -> bool:
        """A unit of the lease's class free on the host (Placement's claim of the flavor's resources:CUSTOM_...)."""
        used = sum(1 for s in self._servers.values()
                   if s.lease_unit and s.lease_id == lease_id and s.host == host and self._holds(s, now))
        return self._lease_inventory.get(lease_id, {}).get(host, 0) - used >= 1

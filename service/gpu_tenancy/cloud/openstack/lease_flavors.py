"""A lease's own flavor, resource class and inventory, in Nova and Placement.

The flavor asks for one unit of the lease's custom resource class beside its
GPUs, so Placement finds a home for a boot only where that class has a free
unit. The units live on a resource provider of the service's own, `gt_<host>`,
nested under each compute node (Blazar's instance reservations use a
`blazar_<host>` child the same way): nova-compute rewrites the inventory of
the providers it manages, and leaves a child it did not make alone.

A server holding a unit keeps Placement from removing the inventory (409,
inventory in use): then the total is lowered to what is held, so no new
boot lands there, and a later call removes it.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable

from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import (
    LEASE_CLASS_PREFIX, LEASE_FLAVOR_PREFIX, LeaseFlavor, ServerFlavor, ServerState, ShapeSpec,
    lease_flavor_name, lease_resource_class)
from gpu_tenancy.cloud.openstack.capacity import hypervisors
from gpu_tenancy.cloud.openstack.errors import CALL_ERRORS, wrap

log = logging.getLogger(__name__)
LEASE_SPEC = "gpu_tenancy:lease"        # flavor extra specs naming the lease and its project
PROJECT_SPEC = "gpu_tenancy:project"
PROVIDER_PREFIX = "gt_"
# 1.14 nested providers, 1.20 a new provider in the reply, 1.26 reserved may equal total
PLACEMENT = "1.26"
RETRIES = 5                             # generation conflicts with another writer in a row
# a flavor's extra specs that ask for a resource (resources:X, and the granular resources1:X,
# resources_suffix:X), and those that ask for a device whatever its class
RESOURCE_SPEC = re.compile(r"^resources[A-Za-z0-9_-]*:(?P<rc>.+)$")
DEVICE_SPECS = ("pci_passthrough:alias", "accel:device_profile")
GPU_CLASSES = ("VGPU", "PGPU")


class InventoryInUse(Exception):
    pass


def provider_name(host: str) -> str:
    return PROVIDER_PREFIX + host


def lease_of_class(resource_class: str) -> str:
    """The lease id back from its class name: lease ids are lower-case UUIDs, whose '-'
    lease_resource_class turned into '_'."""
    return resource_class[len(LEASE_CLASS_PREFIX):].lower().replace("_", "-")


def flavor_lease(server) -> str | None:
    """The lease whose flavor the server was booted with, from the flavor Nova embeds in it
    (>= 2.47): its lease spec, or else the lease's class or its name (specs a flavor made anew
    keeps); None for any other flavor, or when Nova does not say. Unlike the server's metadata,
    which its project may set to anything, only an admin makes flavors, and the project of
    a lease alone may boot with its flavor."""
    flavor = server.flavor or {}
    specs = flavor.get("extra_specs") or {}
    if specs.get(LEASE_SPEC):
        return specs[LEASE_SPEC]
    classes = [key[len("resources:"):] for key in specs if key.startswith(f"resources:{LEASE_CLASS_PREFIX}")]
    if classes:
        return lease_of_class(classes[0])
    name = flavor.get("original_name") or ""
    return name[len(LEASE_FLAVOR_PREFIX):] if name.startswith(LEASE_FLAVOR_PREFIX) else None


def server_flavor(server, gpu_class: Callable[[str], bool] = lambda rc: False) -> ServerFlavor | None:
    """The flavor the server is on now, as Nova embeds it (>= 2.47: its name and extra specs,
    no id; openstacksdk then answers the name for its id) or names it (before: its id only).
    It asks for GPUs if it is a lease's, asks for a PCI device or an accelerator, or for a
    resource class `gpu_class` says is a GPU's (or VGPU, PGPU). Its specs are shown to the
    service's admin connection; a flavor with none asks for none."""
    flavor = server.flavor or {}
    if not flavor:
        return None
    name = flavor.get("original_name")
    specs = flavor.get("extra_specs") or {}
    if not name and not specs:
        return ServerFlavor(id=flavor.get("id"))
    lease = flavor_lease(server)
    classes = [match["rc"] for key, value in specs.items()
               if (match := RESOURCE_SPEC.match(key)) and str(value).strip() not in ("", "0")]
    gpus = (lease is not None or any(specs.get(key) for key in DEVICE_SPECS)
            or any(rc in GPU_CLASSES or rc.startswith(LEASE_CLASS_PREFIX) or gpu_class(rc) for rc in classes))
    return ServerFlavor(name=name or None, lease_id=lease, gpus=gpus)


class LeaseFlavors:
    """The per-lease half of the openstack driver, on the service's admin connection."""

    def __init__(self, admin, flavor_extra_specs: dict[str, str]):
        self.admin = admin
        self.flavor_extra_specs = flavor_extra_specs

    # --- Placement, raw: openstacksdk has no call for nested providers or class PUT ---------
    def _call(self, method: str, url: str, ok=(200, 201, 204), **kw):
        response = getattr(self.admin.placement, method)(url, microversion=PLACEMENT, **kw)
        if response.status_code not in ok:
            sdk.raise_from_response(response)
        return response

    @staticmethod
    def _in_use(exc: sdk.HttpException) -> bool:
        """A 409 for an inventory that allocations hold, not a generation conflict. Placement
        gives both the code placement.concurrent_update: only the detail tells them apart."""
        text = exc.response.text if exc.response is not None else str(exc)
        return "in use" in text.lower()

    # --- the class ----------------------------------------------------------------------
    def ensure_class(self, lease_id: str) -> str:
        name = lease_resource_class(lease_id)
        try:
            self._call("put", f"/resource_classes/{name}")   # 201 made, 204 there already
        except CALL_ERRORS as exc:
            raise wrap(exc, f"making the resource class {name} failed") from exc
        return name

    def remove_class(self, lease_id: str) -> None:
        name = lease_resource_class(lease_id)
        try:
            self._call("delete", f"/resource_classes/{name}", ok=(204, 404))
        except CALL_ERRORS as exc:
            raise wrap(exc, f"removing the resource class {name} failed") from exc

    # --- the providers and their inventory ------------------------------------------------
    def _providers(self) -> dict[str, dict]:
        """The service's own providers by name."""
        body = self._call("get", "/resource_providers").json()
        return {rp["name"]: rp for rp in body["resource_providers"] if rp["name"].startswith(PROVIDER_PREFIX)}

    def _make_provider(self, host: str) -> dict:
        nodes = {(h.get("service") or {}).get("host"): h["id"] for h in hypervisors(self.admin)}
        if host not in nodes:
            raise sdk.ResourceNotFound(f"no compute node of host {host} in Nova")
        # the hypervisor's id (2.53+) is its compute node's provider, the root of the host's tree
        response = self._call("post", "/resource_providers", ok=(200, 201, 409),
                              json={"name": provider_name(host), "parent_provider_uuid": nodes[host]})
        if response.status_code == 409:      # made meanwhile by another pass
            return self._providers()[provider_name(host)]
        return response.json()

    def _inventory(self, rp_id: str) -> tuple[int, dict]:
        body = self._call("get", f"/resource_providers/{rp_id}/inventories").json()
        return body["resource_provider_generation"], body["inventories"]

    def _used(self, rp_id: str, rc: str) -> int:
        return int(self._call("get", f"/resource_providers/{rp_id}/usages").json()["usages"].get(rc, 0))

    def _put(self, rp_id: str, rc: str, generation: int, total: int, new: bool = False) -> None:
        body = {"resource_provider_generation": generation, "total": total, "reserved": 0,
                "min_unit": 1, "max_unit": total, "step_size": 1, "allocation_ratio": 1.0}
        if new:     # PUT changes an inventory, only POST adds one
            self._call("post", f"/resource_providers/{rp_id}/inventories", json={**body, "resource_class": rc})
        else:
            self._call("put", f"/resource_providers/{rp_id}/inventories/{rc}", json=body)

    def _set(self, rp_id: str, rc: str, planned: int) -> None:
        """Inventory `planned`, or what servers hold there if that is more (no free unit then)."""
        for _ in range(RETRIES):
            generation, inventories = self._inventory(rp_id)
            total = max(planned, self._used(rp_id, rc) if rc in inventories else 0)
            current = inventories.get(rc)
            if current and (current["total"], current["max_unit"], current["reserved"]) == (total, total, 0):
                return
            try:
                return self._put(rp_id, rc, generation, total, new=current is None)
            except sdk.ConflictException:
                continue        # another writer changed the provider: read it again
        raise sdk.ConflictException(f"the inventory of {rc} kept changing under us")

    def _drop(self, rp_id: str, rc: str) -> bool:
        """Remove the class's inventory; False when servers still hold units (the total is then
        lowered to what they hold)."""
        for _ in range(RETRIES):
            generation, inventories = self._inventory(rp_id)
            if rc not in inventories:
                return True
            try:
                self._call("delete", f"/resource_providers/{rp_id}/inventories/{rc}", ok=(204, 404))
                return True
            except sdk.ConflictException as exc:
                if not self._in_use(exc):
                    continue       # a generation conflict: read it again
            used = self._used(rp_id, rc)
            if used and inventories[rc]["total"] > used:
                try:
                    self._put(rp_id, rc, generation, used)
                except sdk.ConflictException:
                    continue
            if used:
                return False
        raise sdk.ConflictException(f"the inventory of {rc} kept changing under us")

    def set_inventory(self, lease_id: str, vms_per_host: dict[str, int]) -> None:
        rc = lease_resource_class(lease_id)
        try:
            providers = self._providers()
            for host, vms in sorted(vms_per_host.items()):
                if vms <= 0:
                    continue
                rp = providers.get(provider_name(host)) or self._make_provider(host)
                self._set(rp["uuid"], rc, vms)
            planned = {provider_name(h) for h, vms in vms_per_host.items() if vms > 0}
            for name, rp in sorted(providers.items()):
                if name not in planned and not self._drop(rp["uuid"], rc):
                    log.info("lease %s: servers still hold %s on %s; removed once they are gone",
                             lease_id, rc, name)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"setting the inventory of {rc} failed") from exc

    def remove_inventory(self, lease_id: str) -> bool:
        rc = lease_resource_class(lease_id)
        try:
            done = [self._drop(rp["uuid"], rc) for _, rp in sorted(self._providers().items())]
        except CALL_ERRORS as exc:
            raise wrap(exc, f"removing the inventory of {rc} failed") from exc
        return all(done)

    # --- the flavor ---------------------------------------------------------------------
    def _find_flavor(self, lease_id: str):
        return self.admin.compute.find_flavor(lease_flavor_name(lease_id), ignore_missing=True,
                                              get_extra_specs=True, is_public=None)

    def ensure_flavor(self, lease_id: str, project_id: str, shape: ShapeSpec) -> LeaseFlavor:
        name, rc = lease_flavor_name(lease_id), lease_resource_class(lease_id)
        specs = {**self.flavor_extra_specs, "pci_passthrough:alias": f"{shape.pci_alias}:{shape.gpus}",
                 f"resources:{rc}": "1", LEASE_SPEC: lease_id, PROJECT_SPEC: project_id}
        compute = self.admin.compute
        try:
            flavor = self._find_flavor(lease_id)
            if flavor is not None:
                have = flavor.extra_specs or {}
                if (flavor.vcpus, flavor.ram, flavor.disk) == (shape.vcpus, shape.ram_mb, shape.disk_gb):
                    missing = {k: v for k, v in specs.items() if have.get(k) != v}
                    if missing:      # a crash between the flavor and its specs
                        compute.create_flavor_extra_specs(flavor, missing)
                    return LeaseFlavor(flavor.id, name, rc)
                compute.delete_flavor(flavor, ignore_missing=True)   # flavors are immutable: anew
            flavor = compute.create_flavor(name=name, vcpus=shape.vcpus, ram=shape.ram_mb, disk=shape.disk_gb,
                                           is_public=False,
                                           description=f"gpu-tenancy lease {lease_id} ({shape.name})")
            compute.create_flavor_extra_specs(flavor, specs)
            return LeaseFlavor(flavor.id, name, rc)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"making the lease flavor {name} failed") from exc

    def grant(self, lease_id: str, project_id: str) -> None:
        self._access(lease_id, project_id, grant=True)

    def revoke(self, lease_id: str, project_id: str) -> None:
        self._access(lease_id, project_id, grant=False)

    def _access(self, lease_id: str, project_id: str, grant: bool) -> None:
        compute, what = self.admin.compute, "granting" if grant else "revoking"
        try:
            flavor = self._find_flavor(lease_id)
            if flavor is None:
                if grant:
                    raise sdk.ResourceNotFound(f"Flavor {lease_flavor_name(lease_id)} could not be found.")
                return
            has = any(a.get("tenant_id") == project_id for a in compute.get_flavor_access(flavor))
            if grant and not has:
                compute.flavor_add_tenant_access(flavor, project_id)
            elif not grant and has:
                compute.flavor_remove_tenant_access(flavor, project_id)
        except sdk.ConflictException as exc:
            if not grant:   # a CloudError, as every failure here: a bare SDK error is a bug of ours upstream
                raise wrap(exc, f"{what} project {project_id} access to {lease_flavor_name(lease_id)} failed") from exc
            # 409: the access exists already (granted meanwhile)
        except sdk.NotFoundException as exc:
            if grant:
                raise wrap(exc, f"{what} project {project_id} access to {lease_flavor_name(lease_id)} failed") from exc
            # the flavor or the access went meanwhile
        except CALL_ERRORS as exc:
            raise wrap(exc, f"{what} project {project_id} access to {lease_flavor_name(lease_id)} failed") from exc

    def remove_flavor(self, lease_id: str) -> None:
        try:
            flavor = self._find_flavor(lease_id)
            if flavor is not None:
                self.admin.compute.delete_flavor(flavor, ignore_missing=True)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"removing the flavor {lease_flavor_name(lease_id)} failed") from exc

    # --- what is in the cloud -------------------------------------------------------------
    def servers(self, lease_id: str) -> list[ServerState]:
        """Servers whose embedded flavor (Nova >= 2.47) is the lease's: by its name, or by the
        lease's class in its specs (a flavor deleted and made anew keeps both)."""
        name, rc = lease_flavor_name(lease_id), f"resources:{lease_resource_class(lease_id)}"
        try:
            found = []
            for server in self.admin.compute.servers(details=True, all_projects=True):
                flavor = server.flavor or {}
                if flavor.get("original_name") != name and rc not in (flavor.get("extra_specs") or {}):
                    continue
                if server.status == "DELETED":   # SOFT_DELETED holds its unit and GPUs, and may be restored
                    continue
                fault = (server.fault or {}).get("message") if server.status == "ERROR" else None
                found.append(ServerState(server.id, server.status, server.compute_host, fault, server.task_state,
                                         server.name, server.project_id, flavor=server_flavor(server)))
            return found
        except CALL_ERRORS as exc:
            raise wrap(exc, f"listing the servers of lease {lease_id} failed") from exc

    def leases(self) -> set[str]:
        try:
            found = {lease_of_class(rc["name"])
                     for rc in self._call("get", "/resource_classes").json()["resource_classes"]
                     if rc["name"].startswith(LEASE_CLASS_PREFIX)}
            for rp in self._providers().values():
                _, inventories = self._inventory(rp["uuid"])
                found |= {lease_of_class(rc) for rc in inventories if rc.startswith(LEASE_CLASS_PREFIX)}
            compute = self.admin.compute
            for flavor in compute.flavors(details=True, is_public=None):
                if flavor.name.startswith(LEASE_FLAVOR_PREFIX):
                    specs = flavor.extra_specs or compute.fetch_flavor_extra_specs(flavor).extra_specs or {}
                    found.add(specs.get(LEASE_SPEC) or flavor.name[len(LEASE_FLAVOR_PREFIX):])
            return found
        except CALL_ERRORS as exc:
            raise wrap(exc, "listing the leases' classes, inventories and flavors failed") from exc

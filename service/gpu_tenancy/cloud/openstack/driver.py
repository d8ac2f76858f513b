"""OpenStackCloud: the CloudDriver on a real OpenStack cloud, with openstacksdk.

- Capacity from Placement (GPU child providers) and Nova (host state).
- Each lease has its own private flavor, resource class and inventory on the
  hosts planned for it (lease_flavors.py); its project has access to the
  flavor only while the lease is active.
- Servers and new volumes are made in the tenant's project (a connection
  scoped to it), tagged with the lease id in their metadata; servers are
  pinned to the host the planner chose (compute API microversion >= 2.74).
- Volumes are never deleted: deleting a server detaches them.
- A parked lease's servers are shelved and offloaded, and unshelved pinned to a host
  (compute API microversion 2.91).
Calls that fail raise CloudError with the failure class and the cloud's message.
"""
from __future__ import annotations

import base64
import logging
import time

from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import (
    LEASE_FLAVOR_PREFIX, LEASE_TAG, SHELVABLE, BootRequest, CloudDriver, CloudError, CloudObject, HostInfo, LeaseFlavor,
    ServerState, ShapeSpec, VolumeInfo, VolumeRequest)
from gpu_tenancy.cloud.openstack.capacity import GpuInventory
from gpu_tenancy.cloud.openstack.connection import Connections, connect
from gpu_tenancy.cloud.openstack.errors import CALL_ERRORS, wrap
from gpu_tenancy.cloud.openstack.lease_flavors import LeaseFlavors, flavor_lease, server_flavor
from gpu_tenancy.cloud.openstack.networks import OpenStackNetworks
from gpu_tenancy.domain.failures import FailureClass

F = FailureClass
log = logging.getLogger(__name__)
# extra specs of a first-wave per-project flavor: its shape and project (list_tagged shows
# them, and reconcile retires them)
SHAPE_SPEC = "gpu_tenancy:shape"
PROJECT_SPEC = "gpu_tenancy:project"
VM_TAG = "gpu_tenancy_vm"
HOST_TAG = "gpu_tenancy_host"   # the host the VM was asked on (an attempt elsewhere is another server)
FLAVOR_PREFIX = "gt-"
UNSHELVE_TO_HOST = "2.91"   # the compute API version whose unshelve takes a host


def vm_index(tag) -> int | None:
    """The VM index a server's tag names; None when it names none (the tenant wrote it)."""
    text = str(tag)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


class OpenStackCloud(OpenStackNetworks, CloudDriver):
    name = "openstack"

    def __init__(self, conn, *, resource_classes: dict[str, str], network: str = "auto",
                 project_role: str | None = "admin", volume_timeout: int = 300,
                 flavor_extra_specs: dict[str, str] | None = None):
        self.conns = Connections(conn, project_role)
        # e.g. trait:CUSTOM_GPU_TENANCY=required, the way into the GPU hosts' isolated aggregates
        self.flavor_extra_specs = dict(flavor_extra_specs or {})
        self.inventory = GpuInventory(resource_classes)
        self.leases = LeaseFlavors(conn, self.flavor_extra_specs)
        self.network = network
        self.volume_timeout = volume_timeout

    @classmethod
    def from_options(cls, options) -> "OpenStackCloud":
        """From the driver's options block (cloud/builtin.py: OpenStackOptions)."""
        conn = connect(options.cloud, options.clouds_yaml_file)
        return cls(conn, resource_classes=options.gpu_resource_classes, network=options.network,
                   project_role=options.project_role or None,
                   flavor_extra_specs=options.flavor_extra_specs)

    @property
    def admin(self):
        return self.conns.service

    # --- capacity ---------------------------------------------------------------------------
    def capacity(self) -> list[HostInfo]:
        try:
            return self.inventory.hosts(self.admin)
        except CALL_ERRORS as exc:
            raise wrap(exc, "reading hosts from Placement and Nova failed") from exc

    # --- flavors ----------------------------------------------------------------------------
    def _flavor_name(self, project_id: str, shape_name: str) -> str:
        """A first-wave per-project flavor's name (retire_flavor removes them)."""
        return f"{FLAVOR_PREFIX}{shape_name}-{project_id}"

    # --- a lease's own flavor, class and inventory (lease_flavors.py) --------------------------
    def ensure_lease_class(self, lease_id: str) -> str:
        return self.leases.ensure_class(lease_id)

    def set_lease_inventory(self, lease_id: str, vms_per_host: dict[str, int]) -> None:
        self.leases.set_inventory(lease_id, vms_per_host)

    def ensure_lease_flavor(self, lease_id: str, project_id: str, shape: ShapeSpec) -> LeaseFlavor:
        return self.leases.ensure_flavor(lease_id, project_id, shape)

    def grant_lease_flavor(self, lease_id: str, project_id: str) -> None:
        self.leases.grant(lease_id, project_id)

    def revoke_lease_flavor(self, lease_id: str, project_id: str) -> None:
        self.leases.revoke(lease_id, project_id)

    def lease_servers(self, lease_id: str) -> list[ServerState]:
        return self.leases.servers(lease_id)

    def remove_lease_inventory(self, lease_id: str) -> bool:
        return self.leases.remove_inventory(lease_id)

    def remove_lease_flavor(self, lease_id: str) -> None:
        self.leases.remove_flavor(lease_id)

    def remove_lease_class(self, lease_id: str) -> None:
        self.leases.remove_class(lease_id)

    def leases_in_cloud(self) -> set[str]:
        return self.leases.leases()

    def retire_flavor(self, project_id: str, shape_name: str) -> None:
        name = self._flavor_name(project_id, shape_name)
        try:
            flavor = self.admin.compute.find_flavor(name, ignore_missing=True, is_public=None)
            if flavor is not None:
                self.admin.compute.delete_flavor(flavor, ignore_missing=True)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"removing the flavor {name} failed") from exc

    # --- images -----------------------------------------------------------------------------
    def check_image(self, image_ref: str) -> None:
        try:
            image = self.admin.image.find_image(image_ref, ignore_missing=True) if image_ref else None
        except CALL_ERRORS as exc:
            raise wrap(exc, f"looking up image {image_ref!r} failed", F.IMAGE) from exc
        if image is None:
            raise CloudError(F.IMAGE, f"image {image_ref!r} is not in Glance",
                             f"No Image found for {image_ref}")
        if image.status != "active":
            raise CloudError(F.IMAGE, f"image {image_ref!r} is {image.status}, not active",
                             f"Image {image.id} has status {image.status}")

    # --- volumes ----------------------------------------------------------------------------
    def ensure_volume(self, project_id: str, lease_id: str, request: VolumeRequest) -> str:
        try:
            storage = self.conns.project(project_id).block_storage
            if request.volume_id:
                volume = self._owned_volume(storage, project_id, request.volume_id)
                if volume.status == "in-use" and self._attached_to_lease(volume, lease_id):
                    return volume.id        # a repeat call after the attach
                if volume.status != "available":
                    raise CloudError(F.VOLUME, f"volume {volume.id} is {volume.status}, not available",
                                     f"Volume {volume.id} status must be available, but current status is: "
                                     f"{volume.status}.")
                return volume.id
            volume = next((v for v in storage.volumes(details=True)
                           if (v.metadata or {}).get(LEASE_TAG) == lease_id), None)
            if volume is None:
                if not request.size_gb or request.size_gb < 1:
                    raise CloudError(F.VOLUME, "a new volume needs a size of at least 1 GB")
                volume = storage.create_volume(size=request.size_gb, name=f"gt-{lease_id[:8]}-data",
                                               description=f"data volume of gpu-tenancy lease {lease_id}",
                                               metadata={LEASE_TAG: lease_id})
            return self._wait_volume(storage, volume.id)
        except sdk.NotFoundException as exc:
            raise CloudError(F.VOLUME, f"volume {request.volume_id} not found in the project",
                             f"Volume {request.volume_id} could not be found.") from exc
        except CALL_ERRORS as exc:
            raise wrap(exc, "making the data volume failed", F.VOLUME) from exc

    def check_volume_owner(self, project_id: str, volume_id: str) -> None:
        try:
            self._owned_volume(self.admin.block_storage, project_id, volume_id)
        except sdk.NotFoundException as exc:
            raise CloudError(F.VOLUME, f"volume {volume_id} not found in the project",
                             f"Volume {volume_id} could not be found.") from exc
        except CALL_ERRORS as exc:
            raise wrap(exc, f"reading volume {volume_id} failed", F.API_ERROR) from exc

    @staticmethod
    def _owned_volume(storage, project_id: str, volume_id: str):
        """The volume, if the cloud says it is the project's. The service user is an admin, who
        sees every project's volumes: another project's looks missing, and so does one whose
        project Cinder does not tell (its policy may hide it), rather than be taken on trust."""
        volume = storage.get_volume(volume_id)
        if volume.project_id != project_id:
            raise sdk.NotFoundException(f"Volume {volume_id} could not be found.")
        return volume

    def _wait_volume(self, storage, volume_id: str) -> str:
        deadline = time.monotonic() + self.volume_timeout
        while True:
            volume = storage.get_volume(volume_id)
            if volume.status in ("available", "in-use"):
                return volume.id
            if volume.status.startswith("error"):
                raise CloudError(F.VOLUME, f"volume {volume_id} went to {volume.status}",
                                 f"Volume {volume_id} status is {volume.status}")
            if time.monotonic() > deadline:
                raise CloudError(F.VOLUME, f"volume {volume_id} was not available within {self.volume_timeout} s")
            time.sleep(0.5)

    @staticmethod
    def _attached_to_lease(volume, lease_id: str) -> bool:
        return any(a.get("server_id") for a in volume.attachments or []) and \
            (volume.metadata or {}).get(LEASE_TAG) in (None, lease_id)

    def volume_status(self, volume_id: str) -> str:
        try:
            return self.admin.block_storage.get_volume(volume_id).status
        except sdk.NotFoundException:
            return "missing"
        except CALL_ERRORS as exc:
            raise wrap(exc, f"reading volume {volume_id} failed", F.VOLUME) from exc

    def project_volumes(self, project_id: str) -> list[VolumeInfo]:
        try:
            # the service user is an admin and would see every project's: ask for this one's only
            found = self.admin.block_storage.volumes(details=True, all_projects=True, project_id=project_id)
            return [VolumeInfo(v.id, v.name or "", v.size, v.status,
                               tuple(a["server_id"] for a in v.attachments or [] if a.get("server_id")),
                               (v.metadata or {}).get(LEASE_TAG))
                    for v in found if v.project_id in (None, project_id)]
        except CALL_ERRORS as exc:
            raise wrap(exc, f"listing the volumes of project {project_id} failed", F.VOLUME) from exc

    # --- servers ----------------------------------------------------------------------------
    def boot(self, request: BootRequest) -> str:
        try:
            compute = self.conns.project(request.project_id).compute
            for server in compute.servers(details=True):
                meta = server.metadata or {}
                gone = server.status in ("DELETED", "SOFT_DELETED") or server.task_state == "deleting"
                # a VM of a failed attempt (being deleted, or asked on another host) is not the same
                # server; one made before the host tag was written is taken as this host's. The tags
                # are the project's to write on any server of its own: one booted with another
                # flavor is not the lease's VM, whatever it says
                if meta.get(LEASE_TAG) == request.lease_id and meta.get(VM_TAG) == str(request.vm_index) \
                        and not gone and meta.get(HOST_TAG, request.host) == request.host \
                        and self._booted_with(server, request):
                    return server.id     # asked before a crash: the same server
            attrs = dict(name=request.name or f"gt-{request.lease_id[:8]}-{request.vm_index}",
                         flavor_id=request.flavor_id, image_id=request.image_ref, host=request.host,
                         metadata={LEASE_TAG: request.lease_id, VM_TAG: str(request.vm_index),
                                   HOST_TAG: request.host},
                         **self._boot_networks(request))
            if request.key_name:
                attrs["key_name"] = self._boot_key(compute, request)
            if request.user_data:
                attrs["user_data"] = base64.b64encode(request.user_data.encode()).decode()
            try:
                server = compute.create_server(**attrs)
            finally:
                if request.key_name:   # Nova copied the key into the server at create: the copy goes, made or not
                    self._drop_key_copy(compute, attrs["key_name"])
            return server.id
        except CALL_ERRORS as exc:
            raise wrap(exc, f"asking Nova for VM {request.vm_index} on {request.host} failed") from exc

    @staticmethod
    def _booted_with(server, request: BootRequest) -> bool:
        """Whether the server was booted with the request's flavor (the lease's): as the flavor
        Nova embeds says (>= 2.47), else by the flavor's id (older versions show only that)."""
        flavor = server.flavor or {}
        if flavor.get("original_name") or flavor.get("extra_specs"):
            return flavor_lease(server) == request.lease_id
        return flavor.get("id") == request.flavor_id

    @staticmethod
    def _drop_key_copy(compute, name: str) -> None:
        """The one-off copy of the user's key, after the create (a failure here leaves only a
        public key, and must not hide the create's own)."""
        try:
            compute.delete_keypair(name, ignore_missing=True)
        except CALL_ERRORS as exc:
            log.warning("deleting key pair copy %s: %s", name, exc)

    def _boot_key(self, compute, request: BootRequest) -> str:
        """Key pairs belong to users, and the server is made by the service user: so the
        service user gets a one-off copy of the user's public key, named after the lease."""
        try:
            owned = self.admin.compute.get_keypair(request.key_name, user_id=request.user_id)
        except sdk.NotFoundException as exc:
            raise CloudError(F.KEY_PAIR, f"key pair {request.key_name!r} is not one of the user's key pairs",
                             f"Keypair {request.key_name} not found for user {request.user_id}.") from exc
        name = f"gt-{request.lease_id}-{request.vm_index}"
        if compute.find_keypair(name, ignore_missing=True) is None:
            compute.create_keypair(name=name, public_key=owned.public_key)
        return name

    def server_state(self, server_id: str) -> ServerState:
        try:
            server = self.admin.compute.get_server(server_id)
        except sdk.NotFoundException:
            return ServerState(server_id, "DELETED")
        except CALL_ERRORS as exc:
            raise wrap(exc, f"reading server {server_id} failed") from exc
        status = "DELETED" if server.status in ("DELETED", "SOFT_DELETED") else server.status
        fault = (server.fault or {}).get("message") if status == "ERROR" else None
        return ServerState(server.id, status, server.compute_host, fault, server.task_state,
                           addresses=self._addresses(server),
                           flavor=server_flavor(server, lambda rc: self.inventory.model_of(rc) is not None))

    def attach_volume(self, server_id: str, volume_id: str) -> None:
        compute = self.admin.compute
        try:
            if any(a.volume_id == volume_id for a in compute.volume_attachments(server_id)):
                return
            compute.create_volume_attachment(server_id, volume_id=volume_id)
            deadline = time.monotonic() + self.volume_timeout
            while (status := self.admin.block_storage.get_volume(volume_id).status) != "in-use":
                # Nova's API reserves the volume before it answers (Cinder: reserved, then attaching);
                # available again or in error is an attach nova-compute failed and rolled back: said
                # now, not after volume_timeout seconds of the engine's pass waiting on it
                if status == "available" or status.startswith("error"):
                    raise CloudError(F.VOLUME, f"volume {volume_id} was not attached to server {server_id}: "
                                     f"it is {status}", f"Volume {volume_id} status is {status} after the attach")
                if time.monotonic() > deadline:
                    raise CloudError(F.VOLUME, f"volume {volume_id} was not attached within {self.volume_timeout} s")
                time.sleep(0.5)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"attaching volume {volume_id} to server {server_id} failed", F.VOLUME) from exc

    def delete_server(self, server_id: str) -> None:
        # Volumes attached through the API are not deleted with the server: they come back available.
        # A cloud with deferred delete (reclaim_instance_interval) only soft-deletes: the server keeps
        # its GPUs until Nova reclaims it, and its project may restore it meanwhile; so it is then
        # deleted for good (forceDelete), as is one its project soft-deleted itself.
        compute = self.admin.compute
        try:
            if compute.get_server(server_id).status != "SOFT_DELETED":
                compute.delete_server(server_id, ignore_missing=True)
            if compute.get_server(server_id).status == "SOFT_DELETED":
                compute.delete_server(server_id, force=True)
        except sdk.NotFoundException:
            pass   # gone
        except CALL_ERRORS as exc:
            raise wrap(exc, f"deleting server {server_id} failed") from exc

    def confirm_resize(self, server_id: str) -> None:
        compute = self.admin.compute
        try:
            if compute.get_server(server_id).status == "VERIFY_RESIZE":
                compute.confirm_server_resize(server_id)
        except sdk.NotFoundException:
            pass   # gone
        except CALL_ERRORS as exc:
            raise wrap(exc, f"confirming the resize of server {server_id} failed") from exc

    def shelve(self, server_id: str) -> None:
        """Shelve, then offload: a cloud whose shelved_offload_time is 0 offloads at once, any
        other keeps the server SHELVED (its GPUs held) until it is offloaded here."""
        compute = self.admin.compute
        try:
            server = compute.get_server(server_id)
            if server.task_state:   # a shelve (or other task) under way: look again later
                return
            if server.status in SHELVABLE:
                compute.shelve_server(server_id)
            elif server.status == "SHELVED":
                compute.shelve_offload_server(server_id)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"shelving server {server_id} failed") from exc

    def unshelve(self, server_id: str, host: str) -> None:
        compute = self.admin.compute
        try:
            server = compute.get_server(server_id)
            if server.status != "SHELVED_OFFLOADED" or server.task_state:
                return
            # the host is compute API 2.91's: pinned there, as a boot is
            response = compute.post(f"/servers/{server_id}/action", json={"unshelve": {"host": host}},
                                    microversion=UNSHELVE_TO_HOST)
            sdk.raise_from_response(response)
        except CALL_ERRORS as exc:
            raise wrap(exc, f"unshelving server {server_id} on {host} failed") from exc

    def gpus_released(self, server_id: str) -> bool:
        try:
            allocation = self.admin.placement.get_allocation(server_id)
        except sdk.NotFoundException:
            return True
        except CALL_ERRORS as exc:
            raise wrap(exc, f"reading the Placement allocations of {server_id} failed") from exc
        return not allocation.allocations

    # --- what carries our tag ---------------------------------------------------------------
    def list_tagged(self) -> list[CloudObject]:
        compute, storage = self.admin.compute, self.admin.block_storage
        try:
            # a server's metadata is its project's to write, anything at all: the lease it names
            # is a claim (flavor_lease is what the cloud says), and a vm index that is no number
            # is none (it stopped the whole listing, and with it every reconcile)
            objects = [CloudObject("server", s.id, s.metadata[LEASE_TAG], s.project_id,
                                   dict(status=s.status, host=s.compute_host, name=s.name,
                                        vm_index=vm_index(s.metadata.get(VM_TAG, "0")), metadata=dict(s.metadata),
                                        flavor_lease=flavor_lease(s)))
                       for s in compute.servers(details=True, all_projects=True)
                       if LEASE_TAG in (s.metadata or {})]
            objects += [CloudObject("volume", v.id, v.metadata[LEASE_TAG], v.project_id,
                                    dict(status=v.status, size_gb=v.size, name=v.name))
                        for v in storage.volumes(details=True, all_projects=True)
                        if LEASE_TAG in (v.metadata or {})]
            for flavor in compute.flavors(details=True, is_public=None):
                if not flavor.name.startswith(FLAVOR_PREFIX) or flavor.name.startswith(LEASE_FLAVOR_PREFIX):
                    continue     # a lease's own flavor is leases_in_cloud()'s
                specs = flavor.extra_specs or compute.fetch_flavor_extra_specs(flavor).extra_specs or {}
                if SHAPE_SPEC in specs:
                    objects.append(CloudObject("flavor", flavor.id, None, specs.get(PROJECT_SPEC),
                                               dict(name=flavor.name, shape=specs[SHAPE_SPEC])))
            return objects
        except CALL_ERRORS as exc:
            raise wrap(exc, "listing the service's servers, volumes and flavors failed") from exc

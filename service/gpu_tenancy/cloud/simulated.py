"""The simulated cloud: the embedded default driver. It is NOT OpenStack.

An in-process, in-memory cloud that behaves like Nova, Placement, Cinder and
Glance at the CloudDriver boundary, for the demo, fast tests and trace replay.
Everything is lost when the process ends (reconcile then sees servers as
DELETED), unless `state_file` keeps it in a file. Time comes from the injected clock, so a VirtualClock drives it.

Behaviour, as the real services show it:
- boot() returns at once; the server is BUILD until created_at + boot_seconds,
  then ACTIVE, or ERROR with Nova's fault "No valid host was found. There are
  not enough hosts available." when the pinned host is down, disabled, of
  another GPU model (by PCI alias) or has fewer free GPUs than the flavor asks.
  Placement-like: a server holds its GPUs from boot until delete_seconds after
  delete_server(); a server refused a host never holds any (no over-commit).
- Flavors are private, one per lease (cloud/simulated_leases.py): gt-lease-<id>
  with extra specs pci_passthrough:alias=<alias>:<gpus> and one unit of the
  lease's own resource class, which only the lease's hosts carry, only while the
  lease holds them; a boot with it needs a free unit on the pinned host too.
- Volumes are never deleted: delete_server() detaches them (back to available).
  Another project's volume looks missing (isolation).

Config (YAML for from_file, or the same as a dict):

    boot_seconds: 30          # BUILD -> ACTIVE after this much clock time
    delete_seconds: 5         # GPUs released this long after delete
    gpu_models:
      A100: {resource_class: CUSTOM_PGPU_A100, pci_alias: a100}
    hosts:
      - {name: gpu-a100-1, gpu_model: A100, gpus: 8, aggregate: a100-rack1}
      - {prefix: gpu-a100-, count: 4, gpu_model: A100, gpus: 8, aggregate: a100}  # gpu-a100-1..4
      # optional per host: up: false, enabled: false
    images:
      - {id: 3f1c..., name: ubuntu-22.04, status: active}

    state_file: /path/cloud.json  # optional: keep the state in a file, shared by processes

Test hooks (public): inject_failure() (a failing delete: 'delete_server'), slow_deletes(), set_host_state(),
power_off() (a VM stopped by its tenant: SHUTOFF), resize() and revert_resize() (its tenant's resize, to a
plain flavor or one of its own, confirmed by confirm_resize() as its tenant would), set_server_metadata() (the tenant's own tags on its server),
add_volume(), tenant_boot() (a project member's own boot), add_legacy_flavor(), and the read-only
views servers(), volumes(), flavors(), images(), allocations(), free_gpus(), lease_inventory(),
lease_classes().
"""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpu_tenancy.cloud.driver import (
    LEASE_TAG, SHELVABLE, BootRequest, CloudDriver, CloudError, CloudObject, HostInfo, ServerFlavor, ServerState,
    VolumeInfo, VolumeRequest)
from gpu_tenancy.cloud.simulated_leases import NO_VALID_HOST, PLAIN_FLAVOR, LeaseFlavors
from gpu_tenancy.cloud.simulated_networks import SimulatedNetworks
from gpu_tenancy.domain.failures import FailureClass

OPERATIONS = ("ensure_volume", "boot", "attach_volume", "delete_server", "check_image",
              "project_volumes", "check_volume_owner", "server_error", "ensure_lease_class",
              "set_lease_inventory", "ensure_lease_flavor", "grant_lease_flavor", "revoke_lease_flavor",
              "remove_lease_inventory", "remove_lease_flavor", "remove_lease_class", "project_networks",
              "ensure_security_group", "ensure_floating_ip", "release_floating_ips", "shelve", "unshelve",
              "unshelve_error", "confirm_resize")
F = FailureClass
# The cloud's own words per class, worded so the engine's fault classifier recognises them.
DEFAULT_FAULTS = {
    F.NO_VALID_HOST: NO_VALID_HOST,
    F.HOST_DOWN: "Compute host is down: the nova-compute service stopped reporting",
    F.IMAGE: "Image could not be found.",
    F.VOLUME: "Volume could not be found or is in an unexpected state.",
    F.NOVA_QUOTA: "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances",
    F.FORBIDDEN: "Policy doesn't allow compute:servers:create:requested_destination to be performed. (HTTP 403)",
    F.BOOT_TIMEOUT: "Build of instance timed out",
    F.API_ERROR: "Internal Server Error (HTTP 500)",
}


def embed(flavor_id: str, flavor: dict) -> dict:
    """What a server keeps of its flavor: {id: (name, lease id or "", GPUs)}."""
    return {flavor_id: (flavor.get("name"), flavor.get("lease_id") or "", flavor.get("gpus"))}


@dataclass
class _Server:
    id: str
    project_id: str
    lease_id: str             # a tenant's own server: the lease of its flavor
    vm_index: int | None      # None: booted by the tenant
    host: str | None
    flavor_id: str
    image_ref: str
    name: str
    created_at: int
    gpus: int                 # GPUs held (0 when refused a host)
    fault: str | None = None  # set: goes ERROR at ready_at
    stuck: bool = False       # injected BOOT_TIMEOUT: stays BUILD
    deleted_at: int | None = None
    release_seconds: int | None = None   # from delete to its GPUs' release (set by delete_server)
    tagged: bool = True       # carries the lease tag (the service's boots; a tenant's do not)
    # its metadata as its project set it since (set_server_metadata); None: as booted (the tag if tagged)
    metadata: dict | None = None
    lease_unit: bool = False  # booted with a lease flavor: holds a unit of its class with the GPUs
    network_id: str | None = None        # its port (cloud/simulated_networks.py)
    fixed_ip: str | None = None
    shelved_at: int | None = None        # shelved: SHELVED, then SHELVED_OFFLOADED (GPUs released)
    # a shelve asked while its host is down, or under way when it went down: nothing happens there
    # (ACTIVE, task shelving, its GPUs held) until the host is up again, as with Nova's compute gone
    shelve_stalled: bool = False
    powered_off: bool = False            # stopped (`openstack server stop`, or shut down in the guest): SHUTOFF
    # resized by its tenant and not confirmed yet (VERIFY_RESIZE): on its new flavor (resize_flavor_id,
    # bound for resize_host), while the old one's claim (GPUs and unit: Nova's migration allocation)
    # is kept until the resize is confirmed or reverted. (The new flavor's claim on resize_host is
    # taken at the confirm here, not at the resize as Nova does.)
    resizing: bool = False
    resize_flavor_id: str | None = None
    resize_host: str | None = None
    # each flavor it was on, as Nova copies it into the server (shown after the flavor is deleted):
    # flavor id -> (name, lease id or "", GPUs)
    embedded: dict = field(default_factory=dict)


@dataclass
class _Volume:
    id: str
    project_id: str
    size_gb: int
    name: str
    metadata: dict = field(default_factory=dict)
    attached_to: str | None = None


class SimulatedCloud(LeaseFlavors, SimulatedNetworks, CloudDriver):
    name = "simulated"

    def __init__(self, config: dict, clock):
        self.clock = clock
        self.boot_seconds = int(config.get("boot_seconds", 30))
        self.delete_seconds = int(config.get("delete_seconds", 5))
        self.gpu_models = {m: dict(spec) for m, spec in (config.get("gpu_models") or {}).items()}
        self._hosts: dict[str, HostInfo] = {}
        for entry in config.get("hosts") or []:
            names = ([entry["name"]] if "name" in entry
                     else [f"{entry['prefix']}{i}" for i in range(1, int(entry["count"]) + 1)])
            if entry["gpu_model"] not in self.gpu_models:
                raise ValueError(f"host {names[0]}: unknown gpu_model {entry['gpu_model']}")
            for name in names:
                self._hosts[name] = HostInfo(name, entry["gpu_model"], int(entry["gpus"]),
                                             bool(entry.get("enabled", True)), bool(entry.get("up", True)),
                                             entry.get("aggregate"))
        self._images = [{"status": "active", **img} for img in config.get("images") or []]
        self._servers: dict[str, _Server] = {}
        self._volumes: dict[str, _Volume] = {}
        self._flavors: dict[str, dict] = {}
        self._lease_classes: list[str] = []                    # lease ids (cloud/simulated_leases.py)
        self._lease_inventory: dict[str, dict[str, int]] = {}  # lease id -> host -> units
        self._failures: dict[str, list] = {}   # operation -> [failure_class, times left, message]
        self._slow_deletes: list[int] = [0, 0]   # [seconds, deletes left]: slower than delete_seconds
        self._lock = threading.RLock()
        self._init_networks(config)
        if config.get("state_file"):   # shared with other processes (crash tests): cloud/simulated_state.py
            from gpu_tenancy.cloud.simulated_state import StateFileLock
            self._lock = StateFileLock(config["state_file"], self)

    @classmethod
    def from_file(cls, path, clock) -> "SimulatedCloud":
        return cls(yaml.safe_load(Path(path).read_text()) or {}, clock)

    # --- test hooks ---------------------------------------------------------------------------
    def inject_failure(self, operation: str, failure_class: FailureClass, times: int = 1,
                       message: str | None = None) -> None:
        """The next `times` calls of `operation` raise CloudError(failure_class). For
        'server_error' the next `times` boots go ERROR after BUILD with the class's fault
        instead (BOOT_TIMEOUT: they stay in BUILD forever), and for 'unshelve_error' the next
        `times` unshelves (BOOT_TIMEOUT: as on a host that died with nothing to spawn it)."""
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}")
        with self._lock:
            self._failures[operation] = [failure_class, int(times),
                                         message or DEFAULT_FAULTS.get(failure_class, "Unexpected error")]

    def slow_deletes(self, seconds: int, times: int = 1) -> None:
        """The next `times` deletes release their GPUs `seconds` after the delete (instead of
        delete_seconds): a slow Placement, or a compute host slow to clean up."""
        with self._lock:
            self._slow_deletes = [int(seconds), int(times)]

    def set_host_state(self, name: str, up: bool | None = None, enabled: bool | None = None) -> None:
        """Like stopping nova-compute (up) or `openstack compute service set --disable`. A shelve
        under way on a host that goes down stalls until it is up again (_Server.shelve_stalled)."""
        with self._lock:
            host = self._hosts[name]
            now = self.clock.now()
            for server in self._servers.values():
                if server.host != name or server.deleted_at is not None:
                    continue
                if up is False and server.shelved_at is not None and not self._offloaded(server, now):
                    server.shelved_at, server.shelve_stalled = None, True
                elif up is True and server.shelve_stalled:
                    server.shelved_at, server.shelve_stalled = now, False
            self._hosts[name] = HostInfo(host.name, host.gpu_model, host.gpus,
                                         host.enabled if enabled is None else enabled,
                                         host.up if up is None else up, host.aggregate)

    def power_off(self, server_id: str) -> None:
        """The tenant stops the VM (`openstack server stop`, or a shutdown in the guest): Nova
        shows it SHUTOFF (vm_state stopped); it keeps its GPUs and its disk."""
        with self._lock:
            self._servers[server_id].powered_off = True

    def resize(self, server_id: str, flavor_id: str = PLAIN_FLAVOR) -> None:
        """The tenant resizes its server (`openstack server resize --flavor`) and does not confirm
        it yet: VERIFY_RESIZE, on its new flavor, its old claim (GPUs, unit) held until
        confirm_resize() (the tenant's `--confirm`, or the service's) or revert_resize(). The new
        flavor: PLAIN_FLAVOR (no GPUs, public), or one of `flavors()` the project may use, on a
        host where it fits (CloudError, no valid host, if none)."""
        with self._lock:
            server = self._servers[server_id]
            host = server.host
            if flavor_id != PLAIN_FLAVOR:
                flavor = self._flavors.get(flavor_id)
                if flavor is None or not self._accessible(flavor, server.project_id):
                    raise CloudError(F.FORBIDDEN, f"flavor {flavor_id} is not available to the project",
                                     f"Flavor {flavor_id} could not be found. (HTTP 400)")
                now = self.clock.now()
                host = next((h for h in sorted(self._hosts) if self._fits(h, flavor, now)), None)
                if host is None:
                    raise CloudError(F.NO_VALID_HOST, "no host for the resize", NO_VALID_HOST)
                server.embedded[flavor_id] = embed(flavor_id, flavor)[flavor_id]
            server.resizing, server.resize_flavor_id, server.resize_host = True, flavor_id, host

    def revert_resize(self, server_id: str) -> None:
        """The tenant reverts the resize: back on its old flavor and its claim, ACTIVE."""
        with self._lock:
            server = self._servers[server_id]
            server.resizing, server.resize_flavor_id, server.resize_host = False, None, None

    def set_server_metadata(self, server_id: str, metadata: dict[str, str]) -> None:
        """The tenant sets metadata on its server (`openstack server set --property`), any key,
        the lease tag too: added to what it has (a key set to None is removed)."""
        with self._lock:
            server = self._servers[server_id]
            merged = {**self._metadata(server), **metadata}
            server.metadata = {k: v for k, v in merged.items() if v is not None}

    def add_volume(self, project_id: str, size_gb: int, name: str | None = None) -> str:
        """A tenant's pre-existing volume (no lease tag)."""
        with self._lock:
            vol = _Volume(str(uuid.uuid4()), project_id, int(size_gb), name or "")
            self._volumes[vol.id] = vol
            return vol.id

    def servers(self) -> dict[str, dict]:
        """Servers not deleted: id -> status, host, project_id, lease_id, vm_index, ..."""
        with self._lock:
            now = self.clock.now()
            return {s.id: dict(status=self._status(s, now), host=s.host, project_id=s.project_id,
                               lease_id=s.lease_id, vm_index=s.vm_index, flavor_id=s.flavor_id,
                               image_ref=s.image_ref, name=s.name, fault=self._fault(s, now))
                    for s in self._servers.values() if s.deleted_at is None}

    def volumes(self) -> dict[str, dict]:
        with self._lock:
            return {v.id: dict(status=self._volume_state(v), project_id=v.project_id, size_gb=v.size_gb,
                               name=v.name, lease_id=v.metadata.get(LEASE_TAG), attached_to=v.attached_to)
                    for v in self._volumes.values()}

    def flavors(self) -> dict[str, dict]:
        with self._lock:
            return {fid: dict(f, extra_specs=dict(f["extra_specs"])) for fid, f in self._flavors.items()}

    def images(self) -> list[dict]:
        with self._lock:
            return [dict(i) for i in self._images]

    def allocations(self) -> dict[str, tuple[str, int]]:
        """server id -> (host, GPUs) held now, as Placement would show."""
        with self._lock:
            now = self.clock.now()
            return {s.id: (s.host, s.gpus) for s in self._servers.values()
                    if self._holds(s, now) and s.host is not None}   # only a placed server holds GPUs

    def free_gpus(self) -> dict[str, int]:
        with self._lock:
            used = {name: 0 for name in self._hosts}
            for host, gpus in self.allocations().values():
                used[host] += gpus
            return {name: h.gpus - used[name] for name, h in self._hosts.items()}

    # --- the driver ---------------------------------------------------------------------------
    def capacity(self) -> list[HostInfo]:
        with self._lock:
            return list(self._hosts.values())

    def retire_flavor(self, project_id: str, shape_name: str) -> None:
        with self._lock:
            for fid, flavor in list(self._flavors.items()):
                if (not flavor.get("lease_id") and flavor["project_id"] == project_id
                        and flavor["shape"] == shape_name):
                    del self._flavors[fid]

    def check_image(self, image_ref: str) -> None:
        with self._lock:
            self._maybe_fail("check_image")
            self._image(image_ref)

    def ensure_volume(self, project_id: str, lease_id: str, request: VolumeRequest) -> str:
        with self._lock:
            self._maybe_fail("ensure_volume")
            if request.volume_id:
                vol = self._volumes.get(request.volume_id)
                if vol is None or vol.project_id != project_id:  # another project's volume looks missing
                    raise CloudError(F.VOLUME, f"volume {request.volume_id} not found in the project",
                                     f"Volume {request.volume_id} could not be found.")
                user = self._servers.get(vol.attached_to) if vol.attached_to else None
                if user is not None and user.lease_id != lease_id:  # in-use by this lease is a repeat call
                    raise CloudError(F.VOLUME, f"volume {vol.id} is in use by another server",
                                     f"Volume {vol.id} status must be available, but current status is: in-use.")
                return vol.id
            for vol in self._volumes.values():
                if vol.metadata.get(LEASE_TAG) == lease_id and vol.project_id == project_id:
                    return vol.id
            if not request.size_gb or request.size_gb < 1:
                raise CloudError(F.VOLUME, "a new volume needs a size of at least 1 GB",
                                 "Invalid input received: size must be an integer greater than 0.")
            vol = _Volume(str(uuid.uuid4()), project_id, int(request.size_gb), f"gt-{lease_id[:8]}-data",
                          {LEASE_TAG: lease_id})
            self._volumes[vol.id] = vol
            return vol.id

    def boot(self, request: BootRequest) -> str:
        with self._lock:
            self._maybe_fail("boot")
            for s in self._servers.values():   # the same server: asked before on this host (not an attempt elsewhere)
                if s.deleted_at is None and (s.lease_id, s.vm_index, s.host) == (request.lease_id, request.vm_index,
                                                                                 request.host):
                    return s.id
            flavor = self._flavors.get(request.flavor_id)
            # private flavor: 400 in Nova (the service sees its lease flavors before any grant)
            if flavor is None or not (flavor.get("lease_id") or self._accessible(flavor, request.project_id)):
                raise CloudError(F.API_ERROR, f"flavor {request.flavor_id} is not available to the project",
                                 f"Flavor {request.flavor_id} could not be found. (HTTP 400)")
            self._image(request.image_ref)
            now = self.clock.now()
            server = _Server(str(uuid.uuid4()), request.project_id, request.lease_id, request.vm_index,
                             request.host, request.flavor_id, request.image_ref,
                             request.name or f"gt-{request.lease_id[:8]}-{request.vm_index}", now, 0,
                             lease_unit=bool(flavor.get("lease_id")), embedded=embed(request.flavor_id, flavor))
            injected = self._take_failure("server_error")
            if injected and injected[0] == F.BOOT_TIMEOUT:
                server.stuck = True
            elif injected:
                server.fault = injected[1]
            if self._fits(request.host, flavor, now):
                server.gpus = flavor["gpus"]  # claimed now, like the scheduler's Placement claim
            else:
                server.fault = NO_VALID_HOST
            self._plug(server, request.network_id)
            self._servers[server.id] = server
            return server.id

    def attach_volume(self, server_id: str, volume_id: str) -> None:
        with self._lock:
            server = self._live("attach_volume", server_id, F.VOLUME, "")
            vol = self._volumes.get(volume_id)
            if vol is None or vol.project_id != server.project_id:
                raise CloudError(F.VOLUME, f"volume {volume_id} not found in the project",
                                 f"Volume {volume_id} could not be found.")
            if vol.attached_to == server_id:
                return
            status = self._status(server, self.clock.now())
            if status != "ACTIVE":
                raise CloudError(F.VOLUME, f"server {server_id} is {status}, not ACTIVE",
                                 f"Cannot 'attach_volume' instance {server_id} while it is in vm_state {status}")
            if vol.attached_to is not None:
                raise CloudError(F.VOLUME, f"volume {volume_id} is attached to another server",
                                 f"Volume {volume_id} status must be available, but current status is: in-use.")
            vol.attached_to = server_id

    def server_state(self, server_id: str) -> ServerState:
        with self._lock:
            server = self._servers.get(server_id)
            if server is None or server.deleted_at is not None:
                return ServerState(server_id, "DELETED")
            now = self.clock.now()
            status = self._status(server, now)
            task = "spawning" if status == "BUILD" else "shelving" if server.shelve_stalled else None
            return ServerState(server.id, status, server.host, self._fault(server, now), task,
                               server.name, server.project_id,
                               self._addresses(server) if status == "ACTIVE" else (), self._server_flavor(server))

    def delete_server(self, server_id: str) -> None:
        with self._lock:
            self._maybe_fail("delete_server")
            server = self._servers.get(server_id)
            if server is None or server.deleted_at is not None:
                return
            for vol in self._volumes.values():
                if vol.attached_to == server_id:
                    vol.attached_to = None  # detached, kept
            server.deleted_at = self.clock.now()
            server.release_seconds = self.delete_seconds
            if self._slow_deletes[1] > 0:
                self._slow_deletes[1] -= 1
                server.release_seconds = self._slow_deletes[0]

    def confirm_resize(self, server_id: str) -> None:
        with self._lock:
            server = self._live("confirm_resize", server_id)
            if not server.resizing:
                return
            # on its new flavor: the old claim is released, the new one's taken (the lease of its
            # flavor, if any, is its lease now; its tags stay as they were)
            new = self._flavors.get(server.resize_flavor_id or "", {})
            server.metadata = self._metadata(server)
            server.flavor_id, server.host = server.resize_flavor_id or PLAIN_FLAVOR, server.resize_host
            server.gpus, server.lease_id = new.get("gpus", 0), new.get("lease_id") or ""
            server.lease_unit = bool(server.lease_id)
            server.resizing, server.resize_flavor_id, server.resize_host = False, None, None

    def shelve(self, server_id: str) -> None:
        with self._lock:
            server = self._live("shelve", server_id)
            if server.shelved_at is not None or server.shelve_stalled:
                return
            status = self._status(server, self.clock.now())
            if status not in SHELVABLE:   # Nova's shelve: vm_state active, stopped, paused or suspended
                raise CloudError(F.API_ERROR, f"server {server_id} is {status}, not ACTIVE",
                                 f"Cannot 'shelve' instance {server_id} while it is in vm_state {status.lower()}"
                                 " (HTTP 409)")
            host = self._hosts.get(server.host or "")
            if host is not None and not host.up:
                server.shelve_stalled = True   # accepted; its compute is not there to do it
                return
            server.shelved_at = self.clock.now()   # offloaded (GPUs released) delete_seconds later

    def unshelve(self, server_id: str, host: str) -> None:
        with self._lock:
            server = self._live("unshelve", server_id)
            now = self.clock.now()
            if not self._offloaded(server, now):
                return
            flavor = self._flavors.get(server.flavor_id)
            if flavor is None or not self._fits(host, flavor, now):
                raise CloudError(F.NO_VALID_HOST, f"server {server_id} cannot be unshelved on {host}",
                                 NO_VALID_HOST)
            # back on the host: the claim is taken now and it boots again (BUILD, then ACTIVE)
            server.shelved_at, server.host, server.created_at = None, host, now
            server.powered_off = False   # Nova's unshelve spawns it and it comes back ACTIVE
            injected = self._take_failure("unshelve_error")
            if injected and injected[0] == F.BOOT_TIMEOUT:
                server.stuck = True
            elif injected:
                server.fault = injected[1]

    def nominal_release_seconds(self) -> int | None:
        return self.delete_seconds

    def gpus_released(self, server_id: str) -> bool:
        with self._lock:
            server = self._servers.get(server_id)
            return server is None or not self._holds(server, self.clock.now())

    def volume_status(self, volume_id: str) -> str:
        with self._lock:
            vol = self._volumes.get(volume_id)
            return "missing" if vol is None else self._volume_state(vol)

    def project_volumes(self, project_id: str) -> list[VolumeInfo]:
        with self._lock:
            self._maybe_fail("project_volumes")
            return [VolumeInfo(v.id, v.name, v.size_gb, self._volume_state(v),
                               (v.attached_to,) if v.attached_to else (), v.metadata.get(LEASE_TAG))
                    for v in self._volumes.values() if v.project_id == project_id]

    def check_volume_owner(self, project_id: str, volume_id: str) -> None:
        with self._lock:
            self._maybe_fail("check_volume_owner")
            vol = self._volumes.get(volume_id)
            if vol is None or vol.project_id != project_id:   # another project's volume looks missing
                raise CloudError(F.VOLUME, f"volume {volume_id} not found in the project",
                                 f"Volume {volume_id} could not be found.")

    def list_tagged(self) -> list[CloudObject]:
        with self._lock:
            now = self.clock.now()
            # the lease a server names is its metadata's, which its project may set; flavor_lease
            # is the lease of the flavor it was booted with, which it may not
            objects = [CloudObject("server", s.id, self._metadata(s)[LEASE_TAG], s.project_id,
                                   dict(status=self._status(s, now), host=s.host, vm_index=s.vm_index,
                                        name=s.name, metadata=self._metadata(s),
                                        flavor_lease=self._flavor_lease(s)))
                       for s in self._servers.values() if s.deleted_at is None and LEASE_TAG in self._metadata(s)]
            objects += [CloudObject("volume", v.id, v.metadata[LEASE_TAG], v.project_id,
                                    dict(status=self._volume_state(v), size_gb=v.size_gb, name=v.name))
                        for v in self._volumes.values() if LEASE_TAG in v.metadata]
            objects += [CloudObject("flavor", fid, None, f["project_id"], dict(name=f["name"], shape=f["shape"]))
                        for fid, f in self._flavors.items() if not f.get("lease_id")]
            objects += [CloudObject("flavor", fid, f["lease_id"], f["project_id"], dict(name=f["name"]))
                        for fid, f in self._flavors.items() if f.get("lease_id")]
            return objects

    # --- internals (called with the lock held) ------------------------------------------------
    def _take_failure(self, operation: str):
        """(class, message) of an injected failure for this call, counting it down; or None."""
        entry = self._failures.get(operation)
        if not entry or entry[1] <= 0:
            return None
        entry[1] -= 1
        return entry[0], entry[2]

    def _maybe_fail(self, operation: str) -> None:
        injected = self._take_failure(operation)
        if injected:
            raise CloudError(injected[0], f"{operation} failed (injected)", injected[1])

    def _image(self, image_ref: str) -> dict:
        image = next((i for i in self._images if image_ref and image_ref in (i.get("id"), i.get("name"))), None)
        if image is None:
            raise CloudError(F.IMAGE, f"image {image_ref!r} is not in the catalog",
                             f"Image {image_ref} could not be found.")
        if image["status"] != "active":
            raise CloudError(F.IMAGE, f"image {image_ref!r} is {image['status']}, not active",
                             f"Image {image['id']} is not active.")
        return image

    def _fits(self, host_name: str, flavor: dict, now: int) -> bool:
        """What Nova's filters plus the Placement claim decide for a pinned host."""
        host = self._hosts.get(host_name)
        if host is None or not host.up or not host.enabled:
            return False
        if self.gpu_models[host.gpu_model].get("pci_alias") != flavor["pci_alias"]:
            return False
        if flavor.get("lease_id") and not self._unit_free(flavor["lease_id"], host_name, now):
            return False
        used = sum(s.gpus for s in self._servers.values() if s.host == host_name and self._holds(s, now))
        return host.gpus - used >= flavor["gpus"]

    def _live(self, operation: str, server_id: str, failure: F = F.API_ERROR,
              http: str = " (HTTP 404)") -> _Server:
        """The server `operation` acts on, once a failure injected for it is raised; Nova's
        "not found" (as a `failure`) when it is gone."""
        self._maybe_fail(operation)
        server = self._servers.get(server_id)
        if server is None or server.deleted_at is not None:
            raise CloudError(failure, f"server {server_id} is gone", f"Instance {server_id} could not be found.{http}")
        return server

    def _offloaded(self, server: _Server, now: int) -> bool:
        """Shelved and offloaded: delete_seconds after the shelve, as a delete releases its GPUs."""
        return server.shelved_at is not None and now >= server.shelved_at + self.delete_seconds

    def _holds(self, server: _Server, now: int) -> bool:
        if server.gpus == 0:
            return False
        if self._offloaded(server, now):
            return False  # its Placement allocation is gone
        if server.fault is not None and now >= server.created_at + self.boot_seconds:
            return False  # a failed build gives its claim back
        release = self.delete_seconds if server.release_seconds is None else server.release_seconds
        return server.deleted_at is None or now < server.deleted_at + release

    def _status(self, server: _Server, now: int) -> str:
        if server.shelved_at is not None:
            return "SHELVED_OFFLOADED" if self._offloaded(server, now) else "SHELVED"
        if server.stuck or now < server.created_at + self.boot_seconds:
            return "BUILD"
        if server.fault:
            return "ERROR"
        if server.resizing:
            return "VERIFY_RESIZE"
        return "SHUTOFF" if server.powered_off else "ACTIVE"

    def _server_flavor(self, server: _Server) -> ServerFlavor:
        """The flavor it is on now: a resize's new one from the resize on."""
        fid = server.resize_flavor_id if server.resizing and server.resize_flavor_id else server.flavor_id
        if fid == PLAIN_FLAVOR:
            return ServerFlavor(PLAIN_FLAVOR, "m1.small", None, False)
        name, lease_id, gpus = server.embedded.get(fid) or embed(fid, self._flavors.get(fid, {}))[fid]
        return ServerFlavor(fid, name, lease_id or None, None if gpus is None else gpus > 0)

    def _flavor_lease(self, server: _Server) -> str | None:
        """The lease whose flavor it is on now."""
        return self._server_flavor(server).lease_id

    @staticmethod
    def _metadata(server: _Server) -> dict:
        if server.metadata is not None:
            return server.metadata
        return {LEASE_TAG: server.lease_id} if server.tagged else {}

    def _fault(self, server: _Server, now: int) -> str | None:
        return server.fault if self._status(server, now) == "ERROR" else None

    def _volume_state(self, vol: _Volume) -> str:
        return "in-use" if vol.attached_to else "available"

"""The cloud boundary: what the service needs from a cloud, shaped after
Nova, Placement, Cinder, Glance and Neutron.

A lease is the only way to its GPUs: each lease gets its own resource class
(`lease_resource_class`), inventory of that class on the hosts planned for it
(one unit per VM planned there, only while the lease holds its GPUs), and its
own private flavor asking for one unit plus the GPUs. The tenant's project
has access to that flavor only while the lease is active. A boot with the
flavor outside the window, beyond the lease's VMs or on another host is then
refused by the cloud itself.

Two drivers implement it: `simulated` (the embedded default, in-process, for
the demo, tests and trace replay) and `openstack` (openstacksdk). Every
object a driver makes carries the lease id (server metadata, volume
metadata, flavor name), so reconcile can find it after a crash.
"""
from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field

from gpu_tenancy.domain.failures import FailureClass

LEASE_TAG = "gpu_tenancy_lease"  # metadata key that carries the lease id
LEASE_CLASS_PREFIX = "CUSTOM_GT_LEASE_"
LEASE_FLAVOR_PREFIX = "gt-lease-"
# the statuses Nova shelves a server in (vm_state active, stopped, paused, suspended): a VM its
# tenant stopped is shelved as a running one, and unshelved ACTIVE
SHELVABLE = ("ACTIVE", "SHUTOFF", "PAUSED", "SUSPENDED")


def lease_resource_class(lease_id: str) -> str:
    """The lease's own resource class: CUSTOM_GT_LEASE_<id, upper case, [A-Z0-9_] only>."""
    return LEASE_CLASS_PREFIX + re.sub(r"[^A-Z0-9_]", "_", lease_id.upper())


def lease_flavor_name(lease_id: str) -> str:
    return LEASE_FLAVOR_PREFIX + lease_id


@dataclass(frozen=True)
class HostInfo:
    """A compute node with GPUs, as Placement and Nova's service list see it."""
    name: str
    gpu_model: str
    gpus: int
    enabled: bool = True   # nova-compute service enabled
    up: bool = True        # nova-compute service state
    aggregate: str | None = None


@dataclass(frozen=True)
class ShapeSpec:
    """What a private flavor is made from."""
    name: str
    gpu_model: str
    gpus: int
    vcpus: int
    ram_mb: int
    disk_gb: int
    pci_alias: str


@dataclass(frozen=True)
class VolumeRequest:
    """A new volume of `size_gb`, or the project's existing volume `volume_id`."""
    size_gb: int | None = None
    volume_id: str | None = None


@dataclass(frozen=True)
class BootRequest:
    project_id: str
    lease_id: str
    vm_index: int
    host: str
    flavor_id: str
    image_ref: str
    volume_id: str | None = None
    key_name: str | None = None   # a key pair of the user who asked for the lease
    user_data: str | None = None
    name: str = ""
    user_id: str | None = None    # who asked for the lease (key pairs belong to users in Nova)
    # the lease's network: an id, "auto" (auto-allocated topology), or None (the driver's own
    # setting: leases made before networks were chosen per lease, or a cloud without them)
    network_id: str | None = None
    security_group: str | None = None   # id of the project's group (ensure_security_group)


@dataclass(frozen=True)
class Address:
    """One address of a server: on which network, fixed or floating."""
    network: str
    ip: str
    kind: str = "fixed"       # fixed, floating


@dataclass(frozen=True)
class NetworkInfo:
    """A network a project can boot on or take floating IPs from, as Neutron shows it."""
    id: str
    name: str
    project_id: str | None    # its owner
    shared: bool = False      # every project may boot on it
    external: bool = False    # router:external: floating IPs come from it (no boot on it unless shared)


@dataclass(frozen=True)
class NetworkPolicy:
    """The operator's network settings, from the driver options (cloud/builtin.py)."""
    default_network: str | None = None    # id or name, for leases that name none
    ssh_cidrs: tuple[str, ...] = ()       # SSH (tcp 22) is open from these only; none: SSH stays closed
    ssh_user: str = "ubuntu"              # the login shown when the image has no os_admin_user


@dataclass(frozen=True)
class ServerFlavor:
    """The flavor a server is on now: after a resize, the new one, confirmed or not (VERIFY_RESIZE).
    Nova from 2.47 embeds the flavor in the server without its id (its name, sizes and extra
    specs, which the service's admin connection is shown), before it only the id: a driver fills
    what its cloud says."""
    id: str | None = None         # the flavor's id (the simulated cloud; Nova before 2.47)
    name: str | None = None       # its name (Nova's original_name)
    lease_id: str | None = None   # the lease whose own flavor it is (by its specs or name, which only an admin sets)
    gpus: bool | None = None      # whether it asks for GPUs (a PCI alias, a GPU resource class); None: not said

    def is_lease(self, lease_id: str, flavor_id: str | None) -> bool:
        """Whether it is that lease's flavor (`flavor_id`: the lease's, as the lease keeps it)."""
        return self.lease_id == lease_id or (self.id is not None and self.id == flavor_id)


@dataclass(frozen=True)
class ServerState:
    id: str
    status: str               # BUILD, ACTIVE, ERROR, SHELVED, SHELVED_OFFLOADED, VERIFY_RESIZE, DELETED (gone)
    host: str | None = None
    fault: str | None = None  # the cloud's own message when status is ERROR
    task: str | None = None   # what the cloud is doing while BUILD (Nova's task_state: spawning, ...)
    name: str | None = None
    project_id: str | None = None
    addresses: tuple[Address, ...] = ()
    flavor: ServerFlavor | None = None   # None: gone, or the driver does not say


@dataclass(frozen=True)
class LeaseFlavor:
    """The lease's own private flavor."""
    id: str
    name: str
    resource_class: str


@dataclass(frozen=True)
class VolumeInfo:
    """A tenant's volume as the cloud has it."""
    id: str
    name: str
    size_gb: int
    status: str                      # available, in-use, creating, error, ...
    attached_to: tuple[str, ...] = ()  # server ids
    lease_id: str | None = None      # the lease that made it, from its tag


@dataclass(frozen=True)
class CloudObject:
    """Something in the cloud that carries a lease tag."""
    kind: str                 # server, volume, flavor
    id: str
    lease_id: str | None
    project_id: str | None = None
    attrs: dict = field(default_factory=dict)


class CloudError(Exception):
    """A cloud call failed; `failure_class` says what kind of failure it was,
    `cloud_message` keeps the cloud's own words beside ours."""

    def __init__(self, failure_class: FailureClass, message: str, cloud_message: str | None = None):
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.cloud_message = cloud_message


class CloudDriver(abc.ABC):
    name = "abstract"

    @abc.abstractmethod
    def capacity(self) -> list[HostInfo]:
        """Hosts with GPUs and their state."""

    # --- a lease's own flavor and resource class: made in this order, removed in reverse ---
    @abc.abstractmethod
    def ensure_lease_class(self, lease_id: str) -> str:
        """Make the lease's resource class (idempotent); returns its name."""

    @abc.abstractmethod
    def set_lease_inventory(self, lease_id: str, vms_per_host: dict[str, int]) -> None:
        """Make the lease's inventory exactly `vms_per_host` (host -> VMs planned there):
        set where planned, removed from every other host (idempotent). Lives on a provider
        of the service's own under each compute node, which Nova leaves alone."""

    @abc.abstractmethod
    def ensure_lease_flavor(self, lease_id: str, project_id: str, shape: ShapeSpec) -> LeaseFlavor:
        """The lease's private flavor: the shape's size and GPUs plus one unit of the lease's
        class (idempotent). No project has access to it yet."""

    @abc.abstractmethod
    def grant_lease_flavor(self, lease_id: str, project_id: str) -> None:
        """Give the project access to the lease's flavor (idempotent)."""

    @abc.abstractmethod
    def revoke_lease_flavor(self, lease_id: str, project_id: str) -> None:
        """Take that access away (idempotent; no-op once the flavor is gone)."""

    @abc.abstractmethod
    def lease_servers(self, lease_id: str) -> list[ServerState]:
        """Every server not yet deleted that is on the lease's flavor now (booted with it, by the
        service or by the tenant, in any project, and not resized off it), with its `flavor`."""

    @abc.abstractmethod
    def remove_lease_inventory(self, lease_id: str) -> bool:
        """Remove the lease's inventory from every host; False (and nothing removed on the
        hosts concerned) while a server still holds a unit, True once none is left."""

    @abc.abstractmethod
    def remove_lease_flavor(self, lease_id: str) -> None:
        """Delete the lease's flavor (no-op if gone)."""

    @abc.abstractmethod
    def remove_lease_class(self, lease_id: str) -> None:
        """Delete the lease's resource class (no-op if gone; call after its inventory)."""

    @abc.abstractmethod
    def leases_in_cloud(self) -> set[str]:
        """Lease ids with a class, inventory or flavor of theirs still in the cloud (for
        reconcile after a crash)."""

    @abc.abstractmethod
    def retire_flavor(self, project_id: str, shape_name: str) -> None:
        """Remove a per-project flavor of the first wave (gt-<shape>-<project>; no-op if
        absent). Reconcile removes them all: leases now boot with their own flavors."""

    @abc.abstractmethod
    def check_image(self, image_ref: str) -> None:
        """Raise CloudError(IMAGE) if the image is missing or not active."""

    @abc.abstractmethod
    def ensure_volume(self, project_id: str, lease_id: str, request: VolumeRequest) -> str:
        """A new volume tagged with the lease, or the project's own existing one; returns its id.
        Idempotent per lease: a second call for the same lease returns the same volume."""

    @abc.abstractmethod
    def boot(self, request: BootRequest) -> str:
        """Ask for a server on the given host, tagged with the lease; returns its id.
        Idempotent per (lease, vm_index, host): a server of the lease's VM on another host (an
        attempt elsewhere, not yet deleted) is not this one."""

    @abc.abstractmethod
    def attach_volume(self, server_id: str, volume_id: str) -> None:
        """Attach the data volume to an ACTIVE server (no-op if already attached)."""

    @abc.abstractmethod
    def server_state(self, server_id: str) -> ServerState:
        """The server's status and the flavor it is on now (`flavor`); DELETED when it is gone."""

    @abc.abstractmethod
    def delete_server(self, server_id: str) -> None:
        """Detach volumes (they stay) and delete the server; no-op if gone."""

    def confirm_resize(self, server_id: str) -> None:
        """Confirm a resize the server's project asked and left unconfirmed (VERIFY_RESIZE): the
        server stays on its new flavor and the old flavor's claim (a lease's GPUs and unit, held by
        the resize until confirmed) is released. No-op in any other state. A driver whose cloud
        has no resize need not implement it."""
        return None

    @abc.abstractmethod
    def shelve(self, server_id: str) -> None:
        """Shelve the server and offload it (its root disk kept as a snapshot, its volumes kept
        attached): it becomes SHELVED_OFFLOADED and its GPUs, and its unit of the lease's class,
        are released (gpus_released). No-op if it is shelved already."""

    @abc.abstractmethod
    def unshelve(self, server_id: str, host: str) -> None:
        """Bring a SHELVED_OFFLOADED server back on `host` (Nova 2.91's pinned unshelve): it
        claims its GPUs and a unit of the lease's class there again and becomes ACTIVE with its
        volumes. No-op unless it is offloaded."""

    @abc.abstractmethod
    def gpus_released(self, server_id: str) -> bool:
        """True once the server's GPUs are free again in the inventory."""

    def nominal_release_seconds(self) -> int | None:
        """How long the cloud says it takes from a delete to the GPUs' release, if it says
        (the engine plans with it until it has measured the cloud's own)."""
        return None

    @abc.abstractmethod
    def volume_status(self, volume_id: str) -> str:
        """available, in-use, ... or 'missing'."""

    @abc.abstractmethod
    def project_volumes(self, project_id: str) -> list[VolumeInfo]:
        """The project's volumes, whoever made them."""

    @abc.abstractmethod
    def check_volume_owner(self, project_id: str, volume_id: str) -> None:
        """Raise CloudError(VOLUME) unless the volume exists and the cloud says it is the
        project's; a volume whose project the cloud does not tell is not the project's."""

    @abc.abstractmethod
    def list_tagged(self) -> list[CloudObject]:
        """Every server, volume and flavor that carries a lease tag or is one of ours. A server's
        lease_id is its tag, which its project may write as it likes; its attrs say what the
        cloud does: flavor_lease, the lease whose flavor it was booted with (None: another
        flavor), and vm_index (None unless its tag is a number)."""

    # --- networks (issue 17): chosen per lease at request time, made before boot ----------
    # A driver without them keeps tenant_networks() False: leases then boot as the driver
    # always did and a lease naming a network or a floating IP is refused.
    network_policy: NetworkPolicy = NetworkPolicy()
    SECURITY_GROUP = "gpu-tenancy-ssh"

    def tenant_networks(self) -> bool:
        """Whether VMs get the lease's network (False: the cloud has none, or the operator
        turned them off)."""
        return False

    def project_networks(self, project_id: str) -> list[NetworkInfo]:
        """Networks the project can use: its own, shared ones, and external ones (for floating
        IPs), each said which."""
        raise NotImplementedError

    def auto_allocation(self) -> bool:
        """Whether the cloud makes a project's network on its first boot (Neutron's
        auto-allocated topology: `networks="auto"` in Nova)."""
        return False

    def ensure_security_group(self, project_id: str) -> str:
        """The project's group SECURITY_GROUP (made once, in the project): ingress SSH (tcp 22)
        from network_policy.ssh_cidrs and ICMP from anywhere, egress as Neutron makes it.
        A CIDR added to ssh_cidrs later gets its rule; no rule is ever removed (the tenant may
        have added their own). Returns its id."""
        raise NotImplementedError

    def ensure_floating_ip(self, lease_id: str, project_id: str, server_id: str) -> str:
        """A floating IP from the external network on the server's port, in the project, described
        with the lease and server so it is found again; returns its address (idempotent)."""
        raise NotImplementedError

    def release_floating_ips(self, lease_id: str) -> None:
        """Release every floating IP made for the lease (no-op when none is left)."""
        raise NotImplementedError

    def floating_ip_leases(self) -> set[str]:
        """Lease ids with a floating IP of theirs still allocated (for reconcile after a crash)."""
        return set()

    def image_login_user(self, image_ref: str) -> str | None:
        """The image's os_admin_user property (the user to log in as), if it has one."""
        return None

"""The cloud boundary: what the service needs from a cloud, shaped after
Nova, Placement, Cinder and Glance.

Two drivers implement it: `simulated` (the embedded default, in-process, for
the demo, tests and trace replay) and `openstack` (openstacksdk). Every
object a driver makes carries the lease id (server metadata, volume
metadata, flavor name), so reconcile can find it after a crash.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field

from gpu_tenancy.domain.failures import FailureClass

LEASE_TAG = "gpu_tenancy_lease"  # metadata key that carries the lease id


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


@dataclass(frozen=True)
class ServerState:
    id: str
    status: str               # BUILD, ACTIVE, ERROR, DELETED (gone)
    host: str | None = None
    fault: str | None = None  # the cloud's own message when status is ERROR
    task: str | None = None   # what the cloud is doing while BUILD (Nova's task_state: spawning, ...)


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

    @abc.abstractmethod
    def ensure_flavor(self, project_id: str, shape: ShapeSpec) -> str:
        """The project's private flavor for a shape (made when first needed); returns its id."""

    @abc.abstractmethod
    def retire_flavor(self, project_id: str, shape_name: str) -> None:
        """Remove the project's flavor for a retired shape (no-op if absent)."""

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
        Idempotent per (lease, vm_index)."""

    @abc.abstractmethod
    def attach_volume(self, server_id: str, volume_id: str) -> None:
        """Attach the data volume to an ACTIVE server (no-op if already attached)."""

    @abc.abstractmethod
    def server_state(self, server_id: str) -> ServerState:
        """The server's status; DELETED when it is gone."""

    @abc.abstractmethod
    def delete_server(self, server_id: str) -> None:
        """Detach volumes (they stay) and delete the server; no-op if gone."""

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
    def list_tagged(self) -> list[CloudObject]:
        """Every server, volume and flavor that carries a lease tag or is one of ours."""

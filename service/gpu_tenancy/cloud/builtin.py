"""The two drivers of this package, registered by name with their options:
`simulated` (the embedded default) and `openstack`."""
from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_tenancy.cloud.registry import Driver

DEMO_CLOUD = str(Path(__file__).parents[1] / "demo" / "cloud.yaml")


def _flat_map(owner: str, name: str, value) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              for k, v in value.items()):
        raise ValueError(f"the {owner} cloud driver's {name} must be a mapping of names to values")


class NetworkOptions:
    """Both drivers' network settings (README: "Networks and logging in"), declared last in
    each driver's options (after the fields that may be given by position):
        default_network: str | None = None   id or name: for a lease that names none, when its project has not one
        ssh_cidrs: tuple = ()                SSH is open from these CIDRs only; none (the default): SSH stays closed
        ssh_user: str = "ubuntu"             the login shown when the image has no os_admin_user property
    """

    if TYPE_CHECKING:   # the fields each driver's options declare
        default_network: str | None
        ssh_cidrs: tuple
        ssh_user: str

    def check_network_options(self, owner: str) -> None:
        if self.default_network is not None and (not isinstance(self.default_network, str)
                                                 or not self.default_network):
            raise ValueError(f"the {owner} cloud driver's default_network must be a network's id or name")
        cidrs = [self.ssh_cidrs] if isinstance(self.ssh_cidrs, str) else self.ssh_cidrs
        if not isinstance(cidrs, (list, tuple)):
            raise ValueError(f"the {owner} cloud driver's ssh_cidrs must be a list of CIDRs")
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr)
            except (TypeError, ValueError):
                raise ValueError(f"the {owner} cloud driver's ssh_cidrs: {cidr!r} is not a CIDR "
                                 "(e.g. 192.0.2.0/24)") from None
        object.__setattr__(self, "ssh_cidrs", tuple(str(ipaddress.ip_network(c)) for c in cidrs))
        if not isinstance(self.ssh_user, str) or not self.ssh_user.strip():
            raise ValueError(f"the {owner} cloud driver's ssh_user must be a user name")

    def network_policy(self):
        from gpu_tenancy.cloud.driver import NetworkPolicy
        return NetworkPolicy(self.default_network, self.ssh_cidrs, self.ssh_user)


@dataclass(frozen=True)
class SimulatedOptions(NetworkOptions):
    file: str = DEMO_CLOUD   # the simulated cloud's hosts, GPU models, images, networks (format: cloud/simulated.py)
    default_network: str | None = None
    ssh_cidrs: tuple = ()
    ssh_user: str = "ubuntu"

    def __post_init__(self):
        if not isinstance(self.file, str) or not self.file:
            raise ValueError("the simulated cloud driver's file must be the path of its YAML description")
        self.check_network_options("simulated")


def _simulated(options: SimulatedOptions, clock):
    from gpu_tenancy.cloud.simulated import SimulatedCloud
    cloud = SimulatedCloud.from_file(options.file, clock)
    cloud.network_policy = options.network_policy()
    return cloud


@dataclass(frozen=True)
class OpenStackOptions(NetworkOptions):
    cloud: str | None = None              # the service's cloud in clouds.yaml (required)
    clouds_yaml_file: str | None = None   # unset: the standard places
    # auto: each lease gets its network (README: "Networks and logging in"); none: VMs get no
    # network and leases name none; a network id: read as default_network (its old spelling)
    network: str = "auto"
    project_role: str = "admin"           # the role the service user grants itself on a tenant project; "" = never
    gpu_resource_classes: dict = field(default_factory=dict)  # CUSTOM_PGPU_A100: A100 (default: that convention)
    # extra specs on every private flavor: trait:CUSTOM_GPU_TENANCY: required where the GPU hosts
    # sit in isolated aggregates (ansible/ sets them up so)
    flavor_extra_specs: dict = field(default_factory=dict)
    default_network: str | None = None
    ssh_cidrs: tuple = ()
    ssh_user: str = "ubuntu"

    def __post_init__(self):
        if not isinstance(self.cloud, str) or not self.cloud:
            raise ValueError("cloud driver openstack needs its cloud option (old spelling: clouds_yaml_cloud): "
                             "the service's cloud in clouds.yaml")
        if self.clouds_yaml_file is not None and not isinstance(self.clouds_yaml_file, str):
            raise ValueError("the openstack cloud driver's clouds_yaml_file must be a path")
        for name in ("network", "project_role"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"the openstack cloud driver's {name} must be a string")
        _flat_map("openstack", "gpu_resource_classes", self.gpu_resource_classes)
        _flat_map("openstack", "flavor_extra_specs", self.flavor_extra_specs)
        self.check_network_options("openstack")


def _openstack(options: OpenStackOptions, clock):
    from gpu_tenancy.cloud.openstack import OpenStackCloud
    cloud = OpenStackCloud.from_options(options)
    policy = options.network_policy()
    if policy.default_network is None and options.network not in ("auto", "none"):
        policy = dataclasses.replace(policy, default_network=options.network)
    cloud.network_policy = policy
    return cloud


SIMULATED = Driver("simulated", SimulatedOptions, _simulated, old_spelling={"simulated_cloud": "file"})
OPENSTACK = Driver("openstack", OpenStackOptions, _openstack, old_spelling={
    "clouds_yaml_cloud": "cloud", "clouds_yaml_file": "clouds_yaml_file", "cloud_network": "network",
    "cloud_project_role": "project_role", "gpu_resource_classes": "gpu_resource_classes",
    "flavor_extra_specs": "flavor_extra_specs"})
DRIVERS = (SIMULATED, OPENSTACK)

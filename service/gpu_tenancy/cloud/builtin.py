"""The two drivers of this package, registered by name with their options:
`simulated` (the embedded default) and `openstack`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpu_tenancy.cloud.registry import Driver

DEMO_CLOUD = str(Path(__file__).parents[1] / "demo" / "cloud.yaml")


def _flat_map(owner: str, name: str, value) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              for k, v in value.items()):
        raise ValueError(f"the {owner} cloud driver's {name} must be a mapping of names to values")


@dataclass(frozen=True)
class SimulatedOptions:
    file: str = DEMO_CLOUD   # the simulated cloud's hosts, GPU models and images (format: cloud/simulated.py)

    def __post_init__(self):
        if not isinstance(self.file, str) or not self.file:
            raise ValueError("the simulated cloud driver's file must be the path of its YAML description")


def _simulated(options: SimulatedOptions, clock):
    from gpu_tenancy.cloud.simulated import SimulatedCloud
    return SimulatedCloud.from_file(options.file, clock)


@dataclass(frozen=True)
class OpenStackOptions:
    cloud: str | None = None              # the service's cloud in clouds.yaml (required)
    clouds_yaml_file: str | None = None   # unset: the standard places
    network: str = "auto"                 # networks for boots: auto, none, or a network id
    project_role: str = "admin"           # the role the service user grants itself on a tenant project; "" = never
    gpu_resource_classes: dict = field(default_factory=dict)  # CUSTOM_PGPU_A100: A100 (default: that convention)
    # extra specs on every private flavor: trait:CUSTOM_GPU_TENANCY: required where the GPU hosts
    # sit in isolated aggregates (ansible/ sets them up so)
    flavor_extra_specs: dict = field(default_factory=dict)

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


def _openstack(options: OpenStackOptions, clock):
    from gpu_tenancy.cloud.openstack import OpenStackCloud
    return OpenStackCloud.from_options(options)


SIMULATED = Driver("simulated", SimulatedOptions, _simulated, old_spelling={"simulated_cloud": "file"})
OPENSTACK = Driver("openstack", OpenStackOptions, _openstack, old_spelling={
    "clouds_yaml_cloud": "cloud", "clouds_yaml_file": "clouds_yaml_file", "cloud_network": "network",
    "cloud_project_role": "project_role", "gpu_resource_classes": "gpu_resource_classes",
    "flavor_extra_specs": "flavor_extra_specs"})
DRIVERS = (SIMULATED, OPENSTACK)

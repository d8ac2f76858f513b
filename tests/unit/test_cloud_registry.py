"""Cloud drivers by name (cloud/registry.py): the configuration's `cloud` block, its old
flat spelling, and a driver registered from outside the package."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml

from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud import registry
from gpu_tenancy.cloud.builtin import DEMO_CLOUD, OpenStackOptions, SimulatedOptions
from gpu_tenancy.cloud.registry import Driver, make_cloud
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import Config

OPENSTACK_BLOCK = {"cloud": "gpu-tenancy", "clouds_yaml_file": "/etc/gpu-tenancy/clouds.yaml", "network": "none",
                   "project_role": "", "gpu_resource_classes": {"CUSTOM_PGPU_A100": "A100"},
                   "flavor_extra_specs": {"trait:CUSTOM_GPU_TENANCY": "required"}}
OLD_SPELLING = {"cloud_driver": "openstack", "clouds_yaml_cloud": "gpu-tenancy",
                "clouds_yaml_file": "/etc/gpu-tenancy/clouds.yaml", "cloud_network": "none", "cloud_project_role": "",
                "gpu_resource_classes": {"CUSTOM_PGPU_A100": "A100"},
                "flavor_extra_specs": {"trait:CUSTOM_GPU_TENANCY": "required"}}


@dataclass(frozen=True)
class EchoOptions:
    greeting: str = "hello"


class EchoCloud:
    def __init__(self, options, clock):
        self.options, self.clock = options, clock


ECHO = Driver("echo", EchoOptions, EchoCloud)


@pytest.fixture
def own_registry(monkeypatch):
    """A registry of this test's own, so that what it registers goes with it."""
    registry.names()   # the built-in ones loaded into the shared one first
    monkeypatch.setattr(registry, "_drivers", dict(registry._drivers))


def test_both_drivers_are_registered_and_the_default_is_the_simulated_demo_cloud():
    assert {"simulated", "openstack"} <= set(registry.names())
    config = Config.load()
    assert (config.cloud_driver, config.cloud_options) == ("simulated", SimulatedOptions(DEMO_CLOUD))
    assert isinstance(make_cloud(config, VirtualClock(0)), SimulatedCloud)


@pytest.mark.parametrize("spelling", [{"cloud_driver": "nova"}, {"cloud": {"driver": "nova"}}])
def test_an_unregistered_driver_is_refused_naming_the_registered_ones(spelling):
    with pytest.raises(ValueError) as err:
        Config.load(**spelling)
    assert "'nova' is not registered" in str(err.value) and "openstack, simulated" in str(err.value)


def test_the_old_flat_spelling_fills_the_same_options_as_the_block():
    block = Config.load(cloud={"driver": "openstack", "options": OPENSTACK_BLOCK})
    old = Config.load(**OLD_SPELLING)
    assert block.cloud_options == old.cloud_options == OpenStackOptions(**OPENSTACK_BLOCK)
    assert block.cloud_driver == old.cloud_driver == "openstack"
    assert dataclasses.replace(block, run_engine=False).cloud_options == block.cloud_options   # made again: the same
    simulated = Config.load(cloud_driver="simulated", simulated_cloud="/srv/cloud.yaml")
    assert simulated.cloud_options == Config.load(cloud={"driver": "simulated", "options": {"file": "/srv/cloud.yaml"}}
                                                  ).cloud_options == SimulatedOptions("/srv/cloud.yaml")


def test_the_old_spelling_of_the_other_driver_is_ignored_as_before():
    config = Config.load(cloud_driver="simulated", cloud_network="none")
    assert config.cloud_options == SimulatedOptions()


@pytest.mark.parametrize("settings, words", [
    ({"cloud": {"driver": "openstack", "options": {"cloud": "x"}}, "cloud_network": "none"}, "cloud_network"),
    ({"cloud": {"driver": "openstack", "options": {"cloud": "x"}}, "cloud_driver": "simulated"}, "cloud_driver"),
    ({"cloud": {"driver": "simulated", "options": {"path": "x"}}}, "unknown options of the simulated"),
    ({"cloud": {"options": {"file": "x"}}}, "{driver: <name>"),
    ({"cloud": {"driver": "simulated", "option": {}}}, "{driver: <name>"),
    ({"cloud": {"driver": "openstack", "options": ["cloud"]}}, "must be a mapping"),
    ({"cloud": {"driver": "openstack"}}, "needs its cloud option (old spelling: clouds_yaml_cloud)"),
    ({"cloud_driver": "openstack"}, "needs its cloud option"),
    ({"cloud": {"driver": "openstack", "options": {"cloud": "x", "network": 5}}}, "network must be a string"),
    ({"cloud": {"driver": "openstack", "options": {"cloud": "x", "flavor_extra_specs": {"a": {"b": 1}}}}},
     "flavor_extra_specs must be a mapping"),
    ({"cloud": {"driver": "simulated", "options": {"file": ""}}}, "simulated cloud driver's file"),
])
def test_bad_cloud_settings_are_refused_in_the_configurations_words(settings, words):
    with pytest.raises(ValueError) as err:
        Config.load(**settings)
    assert words in str(err.value)


def test_the_openstack_options_reach_the_driver(tmp_path):
    clouds = tmp_path / "clouds.yaml"   # the connection is made lazily: nothing listens there
    clouds.write_text("clouds:\n  gpu-tenancy:\n    auth:\n      auth_url: http://127.0.0.1:9/v3\n"
                      "      username: u\n      password: p\n      project_name: service\n"
                      "      user_domain_name: Default\n      project_domain_name: Default\n")
    block = {"driver": "openstack", "options": {**OPENSTACK_BLOCK, "clouds_yaml_file": str(clouds)}}
    for config in (Config.load(cloud=block),
                   Config.load(**{**OLD_SPELLING, "clouds_yaml_file": str(clouds)})):
        cloud = make_cloud(config, VirtualClock(0))
        assert cloud.name == "openstack" and cloud.network == "none" and cloud.conns.project_role is None
        assert cloud.flavor_extra_specs == {"trait:CUSTOM_GPU_TENANCY": "required"}
        assert cloud.inventory.resource_classes == {"CUSTOM_PGPU_A100": "A100"}


def test_a_registered_driver_is_configured_and_made_like_the_built_in_ones(own_registry):
    registry.register(ECHO)
    clock = VirtualClock(0)
    config = Config.load(cloud={"driver": "echo", "options": {"greeting": "hi"}})
    cloud = make_cloud(config, clock)
    assert isinstance(cloud, EchoCloud) and (cloud.options, cloud.clock) == (EchoOptions("hi"), clock)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(Driver("echo", EchoOptions, lambda options, clock: None))
    with pytest.raises(TypeError):
        registry.register(Driver("broken", dict, EchoCloud))


def test_a_driver_of_another_distribution_registers_through_its_entry_point(monkeypatch):
    points = [EntryPoint("echo", f"{__name__}:ECHO", registry.ENTRY_POINT_GROUP),
              EntryPoint("liar", f"{__name__}:ECHO", registry.ENTRY_POINT_GROUP),       # names another driver
              EntryPoint("gone", "no_such_module_here:DRIVER", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: points if group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry, "_drivers", {})
    monkeypatch.setattr(registry, "_loaded", False)
    assert registry.names() == ["echo", "openstack", "simulated"]
    assert isinstance(make_cloud(Config.load(cloud={"driver": "echo"}), VirtualClock(0)), EchoCloud)




def test_the_example_inventorys_cloud_block_is_a_valid_one():
    example = yaml.safe_load((Path(__file__).parents[2] / "ansible" / "inventory" / "example" / "group_vars"
                              / "all.yml").read_text())
    config = Config.load(cloud=example["deploy_config"]["cloud"])
    assert config.cloud_driver == "openstack"
    assert config.cloud_options.flavor_extra_specs == {"trait:CUSTOM_GPU_TENANCY": "required"}

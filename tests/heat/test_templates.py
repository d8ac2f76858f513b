"""Every HOT template in heat_templates/ parses with heatclient's own parser,
every reference in it resolves, every parameter is typed and constrained, and
it asks for nothing a "boot": "tenant" lease cannot give. (No Heat service runs
here: the templates are checked, not launched; the loopback cloud's Heat launches
gpu-training-env.yaml in tests/integration/test_heat_on_openstack.py.)"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

template_format = pytest.importorskip("heatclient.common.template_format")
from heatclient.common import template_utils  # noqa: E402

from gpu_tenancy.domain.lease_ask import SERVICE_BOOT_ONLY  # noqa: E402
from gpu_tenancy.guest.readiness_probe import SCRIPT  # noqa: E402

TEMPLATES = sorted((Path(__file__).parents[2] / "heat_templates").glob("*.yaml"))
PARAMETER_TYPES = {"string", "number", "comma_delimited_list", "json", "boolean"}
PSEUDO_PARAMETERS = {"OS::stack_name", "OS::stack_id", "OS::project_id"}


def walk(node, found: list):
    """Every intrinsic function call in the tree: (name, argument)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("get_param", "get_resource", "get_attr", "get_file", "str_replace"):
                found.append((key, value))
            walk(value, found)
    elif isinstance(node, list):
        for item in node:
            walk(item, found)
    return found


@pytest.fixture(params=TEMPLATES, ids=lambda p: p.name)
def template(request):
    path = request.param
    return path, template_format.parse(path.read_text())


def test_there_is_a_template():
    assert TEMPLATES


def test_parses_as_hot(template):
    _, hot = template
    assert str(hot["heat_template_version"]) == "2021-04-16"
    assert hot["description"].strip()
    assert set(hot) <= {"heat_template_version", "description", "parameters", "parameter_groups",
                        "resources", "outputs", "conditions"}


def test_every_reference_resolves_and_every_parameter_is_used(template):
    _, hot = template
    params, resources = set(hot.get("parameters", {})), set(hot["resources"])
    calls = walk({"resources": hot["resources"], "outputs": hot.get("outputs", {})}, [])
    used = set()
    for name, arg in calls:
        if name == "get_param":
            target = arg[0] if isinstance(arg, list) else arg
            assert target in params | PSEUDO_PARAMETERS, f"get_param {target}: no such parameter"
            used.add(target)
        elif name == "get_resource":
            assert arg in resources, f"get_resource {arg}: no such resource"
        elif name == "get_attr":
            assert arg[0] in resources, f"get_attr {arg[0]}: no such resource"
    for name, body in hot["resources"].items():
        for dep in [body.get("depends_on", [])] if isinstance(body.get("depends_on"), str) else body.get("depends_on", []):
            assert dep in resources, f"{name} depends_on {dep}: no such resource"
    assert params - used == set(), "parameters nothing uses"


def test_every_parameter_has_a_type_and_constraints(template):
    _, hot = template
    for name, spec in hot["parameters"].items():
        assert spec.get("type") in PARAMETER_TYPES, name
        assert spec.get("description") or spec.get("label"), name
        assert spec.get("constraints"), f"parameter {name} has no constraints"
        if "default" in spec and spec["type"] == "number":
            for constraint in spec["constraints"]:
                if "range" in constraint:
                    assert constraint["range"]["min"] <= spec["default"] <= constraint["range"]["max"], name


def test_the_guest_scripts_are_valid_shell(template, tmp_path):
    _, hot = template
    scripts = []
    for _, body in hot["resources"].items():
        config = body.get("properties", {}).get("config")
        if isinstance(config, dict) and isinstance(config.get("str_replace", {}).get("template"), str):
            scripts.append(config["str_replace"]["template"])
    for i, text in enumerate(scripts):
        script = tmp_path / f"s{i}.sh"
        script.write_text(text)
        check = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_every_condition_used_is_defined(template):
    _, hot = template
    conditions = set(hot.get("conditions", {}))
    used = {body["condition"] for body in hot["resources"].values() if "condition" in body}
    used |= {body["condition"] for body in hot.get("outputs", {}).values() if "condition" in body}
    used |= {arg[0] for name, arg in walk_ifs(hot["resources"], [])}
    assert used <= conditions, f"conditions nothing defines: {used - conditions}"
    assert conditions <= used, f"conditions nothing uses: {conditions - used}"


def walk_ifs(node, found: list):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "if":
                found.append((key, value))
            walk_ifs(value, found)
    elif isinstance(node, list):
        for item in node:
            walk_ifs(item, found)
    return found


def test_the_lease_gives_flavor_and_network_and_nothing_pins_a_host(template):
    """Inside a "boot": "tenant" lease, the lease's flavor is what puts the VM on the
    lease's host (Placement); the template must not choose a host or zone itself."""
    _, hot = template
    params, server = hot["parameters"], hot["resources"]["server"]["properties"]
    for name, constraint in (("flavor", "nova.flavor"), ("network", "neutron.network"),
                             ("image", "glance.image"), ("key_name", "nova.keypair")):
        assert "default" not in params[name], f"{name} must be given"
        assert {"custom_constraint": constraint} in params[name]["constraints"], name
    assert server["flavor"] == {"get_param": "flavor"}
    assert server["networks"] == [{"network": {"get_param": "network"}}]
    assert server["key_name"] == {"get_param": "key_name"}
    assert not {"availability_zone", "scheduler_hints"} & set(server)


def test_the_data_volume_is_attached_to_the_server_and_mounted(template):
    _, hot = template
    res = hot["resources"]
    attachment = next(r for r in res.values() if r["type"] == "OS::Cinder::VolumeAttachment")
    assert attachment["properties"] == {"instance_uuid": {"get_resource": "server"},
                                        "volume_id": {"get_resource": "data_volume"}}
    # optional: data_volume_size 0 makes neither the volume nor its attachment
    assert attachment["condition"] == res["data_volume"]["condition"] == "has_data_volume"
    assert hot["conditions"]["has_data_volume"] == {"not": {"equals": [{"get_param": "data_volume_size"}, 0]}}
    assert hot["parameters"]["data_volume_size"]["constraints"] == [{"range": {"min": 0, "max": 65536}}]
    # the mount is the user data (a no-op without volume)
    assert res["user_data"]["properties"]["parts"] == [{"config": {"get_resource": "mount_data_volume"}}]
    assert res["server"]["properties"]["user_data"] == {"get_resource": "user_data"}
    assert res["server"]["properties"]["user_data_format"] == "RAW"


def test_the_mount_script_does_nothing_without_a_volume(template, tmp_path):
    _, hot = template
    replace = hot["resources"]["mount_data_volume"]["properties"]["config"]["str_replace"]
    script = tmp_path / "mount.sh"
    script.write_text(replace["template"].replace("@VOLUME_ID@", "").replace("@MOUNT_POINT@", str(tmp_path / "d")))
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=10, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert not (tmp_path / "d").exists()


def heat_accepts(spec: dict, value) -> bool:
    """Whether Heat's own constraints of a parameter take `value` at validate time: allowed_pattern
    as Heat reads it (re.match to the end of the value), length, range, allowed_values.
    Custom constraints (net_cidr, nova.flavor, ...) need a Heat and are left out here."""
    for constraint in spec.get("constraints", []):
        if "allowed_pattern" in constraint:
            match = re.match(constraint["allowed_pattern"], value)
            if match is None or match.end() != len(value):
                return False
        if "length" in constraint and not (constraint["length"].get("min", 0) <= len(value)
                                           <= constraint["length"].get("max", len(value))):
            return False
        if "range" in constraint and not (constraint["range"].get("min", value) <= value
                                          <= constraint["range"].get("max", value)):
            return False
        if "allowed_values" in constraint and value not in constraint["allowed_values"]:
            return False
    return True


def test_no_parameter_asks_for_what_a_tenant_boot_lease_does_not_have(template):
    """The templates run inside a "boot": "tenant" lease (their flavor is its flavor), and such a
    lease is refused a readiness probe (a 400): it has no readiness URL nor secret to give a stack,
    so a template asking for them offers a probe, gpu-done and gpu-agent that never work."""
    _, hot = template
    assert "readiness_probe" in SERVICE_BOOT_ONLY
    assert not [name for name in hot["parameters"] if name.startswith("readiness")]
    assert not [url for url in template_utils.get_template_contents(template_file=str(template[0]))[0]
                if url.endswith(SCRIPT.name)]


def test_ssh_is_closed_until_the_tenant_names_where_from_and_a_bad_cidr_fails_validation(template):
    """No default: the world (0.0.0.0/0) is never let in unasked. A value that is no IPv4 CIDR is
    refused at validate time; an IPv6 one too, as the rules are IPv4 (Neutron refuses an IPv6
    prefix on them when the stack is half made)."""
    _, hot = template
    spec = hot["parameters"]["ssh_cidr"]
    assert "default" not in spec
    assert {"custom_constraint": "net_cidr"} in spec["constraints"]
    for good in ("192.0.2.0/24", "10.0.0.0/8", "203.0.113.7/32", "0.0.0.0/0"):
        assert heat_accepts(spec, good), good
    for bad in ("", "192.0.2.0", "192.0.2.0/33", "256.0.0.0/8", "192.0.2/24", "192.0.2.0/24 ",
                "192.0.2.0/24,10.0.0.0/8", "2001:db8::/32", "::/0", "any"):
        assert not heat_accepts(spec, bad), bad


def test_a_data_mount_point_that_would_hide_the_system_fails_validation(template):
    """The mount script mounts the volume wherever it is told, as root: on /.. (the root itself),
    /etc or /home (the key cloud-init installed, so no login) the VM is broken, silently, after a
    stack that says CREATE_COMPLETE."""
    _, hot = template
    spec = hot["parameters"]["data_mount_point"]
    for good in ("/data", "/mnt/data", "/scratch/run-1", "/data.v2", "/srv/datasets/"):
        assert heat_accepts(spec, good), good
    for bad in ("/", "data", "/..", "/.", "/data/../etc", "/data/./x", "//data", "/etc", "/home",
                "/home/ubuntu", "/usr/local", "/boot", "/proc/x", "/var", "/root", "/tmp", "/bin",
                "/data x", "/data;reboot", "/" + "d" * 255):
        assert not heat_accepts(spec, bad), bad

"""The cloud_prepare role's compute_node_traits module finds each host's compute node
provider, against stand-ins of Placement and Nova (the module's own code, no cloud)."""
from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from tests.ansible.playbook import ANSIBLE_DIR, require_ansible

LIBRARY = ANSIBLE_DIR / "roles" / "cloud_prepare" / "library" / "compute_node_traits.py"


def module():
    require_ansible()
    sys.path.insert(0, str(ANSIBLE_DIR / "collections"))
    try:
        spec = importlib.util.spec_from_file_location("compute_node_traits", LIBRARY)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    finally:
        sys.path.remove(str(ANSIBLE_DIR / "collections"))
    return loaded


class Reply:
    def __init__(self, body):
        self.body = body

    def json(self):
        return self.body


def cloud(providers: dict[str, str], hypervisors: list[tuple[str, str, str]]):
    """providers: name -> uuid; hypervisors: (service host, hypervisor hostname, id), two per page."""
    def placement_get(url, params=None, microversion=None):
        assert url == "/resource_providers"
        return Reply({"resource_providers": [{"uuid": u, "name": n} for n, u in providers.items()
                                             if n == params["name"]]})

    def compute_get(url, microversion=None):
        page = int(url.partition("page=")[2] or 0)
        rows = hypervisors[2 * page:2 * page + 2]
        more = len(hypervisors) > 2 * page + 2
        return Reply({"hypervisors": [{"id": i, "hypervisor_hostname": node, "service": {"host": host}}
                                      for host, node, i in rows],
                      "hypervisors_links": [{"rel": "next", "href": f"/os-hypervisors/detail?page={page + 1}"}]
                      if more else []})
    return SimpleNamespace(placement=SimpleNamespace(get=placement_get), compute=SimpleNamespace(get=compute_get))


class Failed(Exception):
    pass


def traits_module(conn):
    loaded = module()
    found = object.__new__(loaded.ComputeNodeTraits)
    found.conn = conn

    def fail_json(msg):
        raise Failed(msg)
    found.fail_json = fail_json
    return found


def test_a_host_named_as_placement_names_its_node():
    found = traits_module(cloud({"gpu-a100-1": "rp-1"}, []))
    assert found.provider("gpu-a100-1") == "rp-1"


def test_a_host_whose_node_placement_names_otherwise_is_found_through_nova():
    # the aggregates take nova-compute's host (gpu-a100-3); Placement names the node after its
    # hypervisor hostname (an FQDN here): "no resource provider named gpu-a100-3", and the run stopped
    hypervisors = [("gpu-a100-1", "gpu-a100-1.example", "rp-1"), ("gpu-a100-2", "gpu-a100-2.example", "rp-2"),
                   ("gpu-a100-3", "gpu-a100-3.example", "rp-3")]
    providers = {node: i for _, node, i in hypervisors}
    found = traits_module(cloud(providers, hypervisors))
    assert found.provider("gpu-a100-3") == "rp-3"
    with pytest.raises(Failed, match="no compute node of host gpu-h100-9"):
        found.provider("gpu-h100-9")

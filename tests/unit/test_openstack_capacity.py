"""The openstack driver's GPU inventory (cloud/openstack/capacity.py), against a stand-in of
openstacksdk's Placement and compute proxies: what it reads again when Placement changed."""
from __future__ import annotations

from types import SimpleNamespace

from gpu_tenancy.cloud.openstack.capacity import GpuInventory

NODE = "node-uuid-1"


class Placement:
    """One compute node with two GPU child providers (Nova's PCI in Placement, one device
    each), and what each provider's inventory is now."""

    def __init__(self):
        self.generation = {"gpu-a": 1, "gpu-b": 1}
        self.inventory = {"gpu-a": {"total": 1, "reserved": 0}, "gpu-b": {"total": 1, "reserved": 0}}

    def resource_providers(self):
        yield SimpleNamespace(id=NODE, name="gpu-host-1.example", parent_provider_id=None,
                              root_provider_id=NODE, generation=5)
        for rp in ("gpu-a", "gpu-b"):
            yield SimpleNamespace(id=rp, name=f"gpu-host-1.example_{rp}", parent_provider_id=NODE,
                                  root_provider_id=NODE, generation=self.generation[rp])

    def resource_provider_inventories(self, provider_id):
        inv = self.inventory.get(provider_id)
        return [SimpleNamespace(resource_class="CUSTOM_PGPU_A100", **inv)] if inv else []

    def change(self, provider_id, **inventory):
        """As Placement does on a write of the provider's inventory: its generation moves."""
        self.inventory[provider_id] = inventory or None
        self.generation[provider_id] += 1


class Compute:
    def get(self, url, microversion=None):
        body = {"hypervisors": [{"id": NODE, "hypervisor_hostname": "gpu-host-1.example", "status": "enabled",
                                 "state": "up", "service": {"host": "gpu-host-1"}}]}
        return SimpleNamespace(status_code=200, json=lambda: body, headers={})

    def aggregates(self):
        return []


def gpus(inventory: GpuInventory, conn) -> dict[str, int]:
    return {h.name: h.gpus for h in inventory.hosts(conn)}


def test_a_gpu_the_operator_reserves_in_placement_is_no_longer_offered():
    # Nova leaves a PCI inventory's `reserved` to the operator (pci_placement_translator: "if the
    # operator sets reserved value in placement for the PCI inventories directly then nova will
    # not override that value"): the way to take a faulty GPU out. Offered still, the planner put
    # leases on it that Placement refused (no valid host), attempt after attempt.
    placement = Placement()
    conn = SimpleNamespace(placement=placement, compute=Compute())
    inventory = GpuInventory({"CUSTOM_PGPU_A100": "A100"})
    assert gpus(inventory, conn) == {"gpu-host-1": 2}
    placement.change("gpu-b", total=1, reserved=1)
    assert gpus(inventory, conn) == {"gpu-host-1": 1}
    placement.change("gpu-b", total=1, reserved=0)   # back in service
    assert gpus(inventory, conn) == {"gpu-host-1": 2}


def test_a_gpu_provider_read_before_nova_wrote_its_inventory_is_counted_once_it_has():
    # nova-compute makes a new device's provider, then sets its inventory in another call: a
    # refresh in between read it empty, and the GPU stayed uncounted until the service restarted
    placement = Placement()
    placement.inventory["gpu-b"] = None
    conn = SimpleNamespace(placement=placement, compute=Compute())
    inventory = GpuInventory({"CUSTOM_PGPU_A100": "A100"})
    assert gpus(inventory, conn) == {"gpu-host-1": 1}
    placement.change("gpu-b", total=1, reserved=0)
    assert gpus(inventory, conn) == {"gpu-host-1": 2}


def test_an_unchanged_provider_is_not_read_again():
    placement = Placement()
    reads: list[str] = []
    read = placement.resource_provider_inventories
    placement.resource_provider_inventories = lambda rp: reads.append(rp) or read(rp)
    conn = SimpleNamespace(placement=placement, compute=Compute())
    inventory = GpuInventory({"CUSTOM_PGPU_A100": "A100"})
    gpus(inventory, conn)
    gpus(inventory, conn)
    assert sorted(reads) == ["gpu-a", "gpu-b"]

"""A nova hypervisor driver for tests: no VMs, but N NVIDIA GPUs on the PCI bus.

install.sh copies this file into the venv's nova/virt/ (nova resolves
``compute_driver`` relative to that package only), and nova.conf selects it with

    compute_driver = fake_gpu_driver.FakeGpuDriver

Environment of the nova-compute process:
    GT_FAKE_GPUS          how many GPUs this host has (default 4)
    GT_FAKE_GPU_PRODUCT   their PCI product id, vendor is always NVIDIA (10de);
                          20b5 = A100 80GB PCIe (default), 2330 = H100 SXM5

Each device is a plain ``type-PCI`` function (no PF/VF pairs, which nova's
placement reporting refuses to mix). With ``[pci] report_in_placement`` nova
turns each one into a child resource provider of the host, whose resource class
comes from the matching ``[pci] device_spec``.

Why not one of nova's own fake drivers: ``FakeDriverWithPciResources`` reports
vendor id ``fake-vendor_id``, which does not fit MariaDB's VARCHAR(4) column,
and ``FakeDriver`` uses fixed node UUIDs, so a restarted nova-compute refuses to
start. ``FakeDriverWithoutFakeNodes`` keeps the node UUID in
``$state_path/compute_id``, which is why each host needs its own state_path.
"""

import os

from oslo_serialization import jsonutils

from nova.virt import fake

NVIDIA = "10de"
# first bus number of the fake devices: 0000:81:00.0, 0000:82:00.0, ...
FIRST_BUS = 0x81


def fake_gpus(count, product):
    """The PCI device dicts the resource tracker expects from a driver."""
    return [
        {
            "address": "0000:%02x:00.0" % (FIRST_BUS + i),
            "vendor_id": NVIDIA,
            "product_id": product,
            "dev_type": "type-PCI",
            "status": "available",
            "parent_addr": None,
            "numa_node": None,
            "label": "label_%s_%s" % (NVIDIA, product),
        }
        for i in range(count)
    ]


class FakeGpuDriver(fake.FakeDriverWithoutFakeNodes):
    """A big fake host, so that only the GPUs limit what fits on it."""

    vcpus = 64
    memory_mb = 256 * 1024
    local_gb = 2000

    def __init__(self, virtapi, read_only=False):
        super().__init__(virtapi, read_only)
        self._gpu_count = int(os.environ.get("GT_FAKE_GPUS", "4"))
        self._gpu_product = os.environ.get("GT_FAKE_GPU_PRODUCT", "20b5").lower()

    def get_available_resource(self, nodename):
        resources = super().get_available_resource(nodename)
        resources["pci_passthrough_devices"] = jsonutils.dumps(
            fake_gpus(self._gpu_count, self._gpu_product))
        return resources

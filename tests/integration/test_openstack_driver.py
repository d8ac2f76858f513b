"""The openstack driver against the real services: what only this driver has (Nova's
quota, the service user's roles, a nova-compute that stops).
What every driver must do is tests/contract/test_cloud_driver_contract.py, run on this
driver by test_cloud_driver_contract_openstack.py."""
from __future__ import annotations

import uuid

import pytest

from gpu_tenancy.cloud.driver import BootRequest, CloudError, ShapeSpec, VolumeRequest
from gpu_tenancy.cloud.openstack import OpenStackCloud
from gpu_tenancy.cloud.openstack.connection import connect
from gpu_tenancy.domain.failures import FailureClass
from tests.integration.conftest import CLOUDS, wait_for

A100_X4 = ShapeSpec("itest.a100x4", "A100", 4, 2, 512, 1, "a100")


def test_nova_quota_and_missing_roles_have_their_classes(os_cloud, projects, admin, image_id, clean_cloud):
    b, lease = projects["tenant-b"], str(uuid.uuid4())
    os_cloud.ensure_lease_class(lease)
    os_cloud.set_lease_inventory(lease, {"gpu-a100-1": 1})
    flavor = os_cloud.ensure_lease_flavor(lease, b, A100_X4)
    admin.compute.update_quota_set(b, instances=0)
    try:
        with pytest.raises(CloudError) as quota:
            os_cloud.boot(BootRequest(b, lease, 0, "gpu-a100-1", flavor.id, image_id))
        assert quota.value.failure_class == FailureClass.NOVA_QUOTA
        assert "quota" in quota.value.cloud_message.lower()
    finally:
        admin.compute.update_quota_set(b, instances=-1)
        assert os_cloud.remove_lease_inventory(lease)
        os_cloud.remove_lease_flavor(lease)
        os_cloud.remove_lease_class(lease)

    # a project where the service user has no role, and may not grant itself one
    project = admin.identity.create_project(name=f"itest-{uuid.uuid4().hex[:6]}", domain_id="default")
    try:
        no_grant = OpenStackCloud(connect("gt-service", CLOUDS), resource_classes={}, network="none",
                                  project_role=None)
        with pytest.raises(CloudError) as forbidden:
            no_grant.ensure_volume(project.id, str(uuid.uuid4()), VolumeRequest(size_gb=1))
        assert forbidden.value.failure_class == FailureClass.FORBIDDEN
        assert forbidden.value.cloud_message
    finally:
        admin.identity.delete_project(project, ignore_missing=True)


def test_a_host_whose_nova_compute_stops_is_down_and_back_up_after_restart(os_cloud):
    import pathlib
    import subprocess
    script = pathlib.Path(__file__).parents[2] / "scripts" / "loopback" / "compute.sh"
    subprocess.run(["bash", str(script), "stop", "gpu-h100-1"], check=True, capture_output=True)
    try:
        wait_for("gpu-h100-1 to be down", lambda: not {h.name: h for h in os_cloud.capacity()}["gpu-h100-1"].up,
                 timeout=90, every=2)
        hosts = {h.name: h for h in os_cloud.capacity()}
        assert hosts["gpu-h100-1"].gpus == 2           # Placement still lists its GPUs
        assert hosts["gpu-a100-1"].up and hosts["gpu-a100-2"].up
    finally:
        subprocess.run(["bash", str(script), "start", "gpu-h100-1"], check=True, capture_output=True)
    wait_for("gpu-h100-1 to be up again", lambda: {h.name: h for h in os_cloud.capacity()}["gpu-h100-1"].up,
             timeout=90, every=2)


def test_an_operators_reserved_gpu_is_taken_out_of_the_hosts_capacity_and_given_back(os_cloud, admin):
    """A GPU an operator reserves in Placement (a faulty one, taken out of service) is not
    offered: capacity reads its provider's inventory again once the provider's generation
    moved, in the same process that read it before."""
    placement = admin.placement
    node = next(rp for rp in placement.resource_providers() if rp.name == "gpu-a100-2")
    gpu = next(rp for rp in placement.resource_providers(in_tree=node.id) if rp.id != node.id)
    inventory = next(inv for inv in placement.resource_provider_inventories(gpu.id)
                     if inv.resource_class.startswith("CUSTOM_PGPU_"))
    assert {h.name: h.gpus for h in os_cloud.capacity()}["gpu-a100-2"] == 4   # read (and kept) once

    def set_reserved(units: int) -> None:
        provider = placement.get_resource_provider(gpu.id)
        response = placement.put(f"/resource_providers/{gpu.id}/inventories/{inventory.resource_class}", json={
            "resource_provider_generation": provider.generation, "total": inventory.total, "reserved": units,
            "min_unit": 1, "max_unit": inventory.max_unit, "step_size": 1, "allocation_ratio": 1.0},
            microversion="1.26")   # 1.26: reserved may equal the total (a GPU is one unit)
        assert response.status_code == 200, response.text

    set_reserved(1)
    try:
        assert {h.name: h.gpus for h in os_cloud.capacity()}["gpu-a100-2"] == 3
    finally:
        set_reserved(0)
    assert {h.name: h.gpus for h in os_cloud.capacity()}["gpu-a100-2"] == 4

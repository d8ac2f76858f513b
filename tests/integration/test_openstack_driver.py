"""The openstack driver against the real services: what only this driver has (flavor
access in Nova, Nova's quota, the service user's roles, a nova-compute that stops).
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


def test_a_private_flavor_is_seen_by_its_projects_users_alone(os_cloud, projects):
    a = projects["tenant-a"]
    shape = ShapeSpec(f"itest.{uuid.uuid4().hex[:6]}", "A100", 2, 2, 1024, 1, "a100")
    flavor_id = os_cloud.ensure_flavor(a, shape)
    try:
        alice, bob = connect("gt-alice", CLOUDS), connect("gt-bob", CLOUDS)
        seen = alice.compute.get_flavor(flavor_id, get_extra_specs=True)
        assert seen.is_public is False
        assert seen.extra_specs["pci_passthrough:alias"] == "a100:2"
        assert flavor_id in {f.id for f in alice.compute.flavors()}
        assert flavor_id not in {f.id for f in bob.compute.flavors()}
        with pytest.raises(Exception) as refused:
            bob.compute.get_flavor(flavor_id)
        assert getattr(refused.value, "status_code", None) == 404
    finally:
        os_cloud.retire_flavor(a, shape.name)


def test_nova_quota_and_missing_roles_have_their_classes(os_cloud, projects, admin, image_id, clean_cloud):
    b = projects["tenant-b"]
    flavor = os_cloud.ensure_flavor(b, A100_X4)
    admin.compute.update_quota_set(b, instances=0)
    try:
        with pytest.raises(CloudError) as quota:
            os_cloud.boot(BootRequest(b, str(uuid.uuid4()), 0, "gpu-a100-1", flavor, image_id))
        assert quota.value.failure_class == FailureClass.NOVA_QUOTA
        assert "quota" in quota.value.cloud_message.lower()
    finally:
        admin.compute.update_quota_set(b, instances=-1)
        os_cloud.retire_flavor(b, A100_X4.name)

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

"""The openstack driver against the real services, call by call: capacity,
private flavors, images, volumes and the failure class of each cloud error."""
from __future__ import annotations

import uuid

import pytest

from gpu_tenancy.cloud.driver import BootRequest, CloudError, ShapeSpec, VolumeRequest
from gpu_tenancy.cloud.openstack import OpenStackCloud
from gpu_tenancy.cloud.openstack.connection import connect
from gpu_tenancy.domain.failures import FailureClass
from gpu_tenancy.engine.lifecycle import classify_fault
from tests.integration.conftest import CLOUDS, HOSTS, wait_for

A100_X4 = ShapeSpec("itest.a100x4", "A100", 4, 2, 512, 1, "a100")


def test_capacity_is_read_from_placement_and_nova(os_cloud, admin):
    hosts = {h.name: h for h in os_cloud.capacity()}
    assert {name: (h.gpu_model, h.gpus) for name, h in hosts.items()} == HOSTS
    assert all(h.up and h.enabled for h in hosts.values())

    service = next(s for s in admin.compute.services(binary="nova-compute") if s.host == "gpu-h100-1")
    admin.compute.disable_service(service, host="gpu-h100-1", binary="nova-compute",
                                  disabled_reason="gpu-tenancy integration test")
    try:
        assert {h.name: h.enabled for h in os_cloud.capacity()} == {
            "gpu-a100-1": True, "gpu-a100-2": True, "gpu-h100-1": False}
    finally:
        admin.compute.enable_service(service, host="gpu-h100-1", binary="nova-compute")
    assert all(h.enabled for h in os_cloud.capacity())


def test_a_shape_becomes_a_private_flavor_of_its_project_alone(os_cloud, projects):
    a = projects["tenant-a"]
    shape = ShapeSpec(f"itest.{uuid.uuid4().hex[:6]}", "A100", 2, 2, 1024, 1, "a100")
    flavor_id = os_cloud.ensure_flavor(a, shape)
    try:
        assert os_cloud.ensure_flavor(a, shape) == flavor_id          # made once, reused after
        alice, bob = connect("gt-alice", CLOUDS), connect("gt-bob", CLOUDS)
        seen = alice.compute.get_flavor(flavor_id, get_extra_specs=True)
        assert seen.is_public is False
        assert seen.extra_specs["pci_passthrough:alias"] == "a100:2"
        assert flavor_id in {f.id for f in alice.compute.flavors()}
        assert flavor_id not in {f.id for f in bob.compute.flavors()}
        with pytest.raises(Exception) as refused:
            bob.compute.get_flavor(flavor_id)
        assert getattr(refused.value, "status_code", None) == 404
        listed = [o for o in os_cloud.list_tagged() if o.kind == "flavor" and o.id == flavor_id]
        assert [(o.project_id, o.attrs["shape"]) for o in listed] == [(a, shape.name)]
    finally:
        os_cloud.retire_flavor(a, shape.name)
    assert all(o.id != flavor_id for o in os_cloud.list_tagged())


def test_a_missing_or_inactive_image_is_an_image_failure(os_cloud, admin, image_id):
    os_cloud.check_image(image_id)
    with pytest.raises(CloudError) as missing:
        os_cloud.check_image(str(uuid.uuid4()))
    assert missing.value.failure_class == FailureClass.IMAGE
    queued = admin.image.create_image(name=f"itest-empty-{uuid.uuid4().hex[:6]}", disk_format="raw",
                                      container_format="bare", allow_duplicates=True)
    try:
        with pytest.raises(CloudError) as inactive:
            os_cloud.check_image(queued.id)
        assert inactive.value.failure_class == FailureClass.IMAGE
        assert "queued" in inactive.value.message
    finally:
        admin.image.delete_image(queued, ignore_missing=True)


def test_volumes_are_made_once_per_lease_and_another_projects_volume_is_refused(os_cloud, projects, admin):
    a, b = projects["tenant-a"], projects["tenant-b"]
    lease = str(uuid.uuid4())
    made = os_cloud.ensure_volume(a, lease, VolumeRequest(size_gb=1))
    try:
        assert os_cloud.ensure_volume(a, lease, VolumeRequest(size_gb=1)) == made
        volume = admin.block_storage.get_volume(made)
        assert (volume.project_id, volume.status, volume.size) == (a, "available", 1)
        listed = {v.id: v for v in os_cloud.project_volumes(a)}
        assert (listed[made].status, listed[made].size_gb, listed[made].lease_id) == ("available", 1, lease)
        assert made not in {v.id for v in os_cloud.project_volumes(b)}
        with pytest.raises(CloudError) as other:
            os_cloud.ensure_volume(b, str(uuid.uuid4()), VolumeRequest(volume_id=made))
        assert other.value.failure_class == FailureClass.VOLUME
    finally:
        admin.block_storage.delete_volume(made, ignore_missing=True)


def test_a_pinned_boot_on_a_host_without_those_gpus_fails_with_no_valid_host(os_cloud, projects, image_id,
                                                                            clean_cloud):
    a = projects["tenant-a"]
    flavor = os_cloud.ensure_flavor(a, A100_X4)
    server = os_cloud.boot(BootRequest(a, str(uuid.uuid4()), 0, "gpu-h100-1", flavor, image_id,
                                       name="itest-wrong-host"))
    state = wait_for("the boot to fail", lambda: (s := os_cloud.server_state(server)).status == "ERROR" and s)
    assert "No valid host" in state.fault
    assert classify_fault(state.fault) == FailureClass.NO_VALID_HOST
    os_cloud.delete_server(server)
    wait_for("the server to go", lambda: os_cloud.server_state(server).status == "DELETED")
    os_cloud.retire_flavor(a, A100_X4.name)


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

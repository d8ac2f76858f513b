"""The cloud driver contract (tests/contract/test_cloud_driver_contract.py), every case,
on the openstack driver against the loopback cloud: the same functions, collected here
with this module's `rig`."""
from __future__ import annotations

import functools
import uuid

import pytest
from openstack import exceptions as sdk

from gpu_tenancy.cloud.openstack.connection import connect

from tests.contract.test_cloud_driver_contract import *  # noqa: F401,F403  (the cases)
from tests.contract.test_cloud_driver_contract import Rig
from tests.contract.test_lease_flavor_contract import *  # noqa: F401,F403  (the per-lease flavor cases)
from tests.integration.conftest import CLOUDS, wait_for

MEMBERS = {"tenant-a": "gt-alice", "tenant-b": "gt-bob"}   # a plain member of each project


class OpenStackRig(Rig):
    name = "openstack"

    def __init__(self, cloud, admin, projects, image_id):
        super().__init__()
        self.cloud, self.admin, self.image = cloud, admin, image_id
        self.project, self.other = projects["tenant-a"], projects["tenant-b"]
        self.members = {projects[name]: cloud_name for name, cloud_name in MEMBERS.items()}

    def wait(self, what, check, timeout=120):
        return wait_for(what, check, timeout=timeout)

    def set_enabled(self, host, enabled):
        compute = self.admin.compute
        service = next(s for s in compute.services(binary="nova-compute") if s.host == host)
        if enabled:
            compute.enable_service(service, host=host, binary="nova-compute")
        else:
            compute.disable_service(service, host=host, binary="nova-compute",
                                    disabled_reason="gpu-tenancy driver contract test")

    def inactive_image(self):
        queued = self.admin.image.create_image(name=f"contract-empty-{uuid.uuid4().hex[:6]}", disk_format="raw",
                                               container_format="bare", allow_duplicates=True)
        self.cleanups.append(lambda: self.admin.image.delete_image(queued, ignore_missing=True))
        return queued.id

    def stop(self, server):
        self.admin.compute.stop_server(server)
        wait_for("the server to be SHUTOFF", lambda: self.admin.compute.get_server(server).status == "SHUTOFF")

    def tenant_volume(self, project, size_gb):
        storage = self.cloud.conns.project(project).block_storage   # made in the project, as its user would
        volume = storage.create_volume(size=size_gb, name=f"contract-own-{uuid.uuid4().hex[:6]}")
        self.cleanups.append(lambda: self.delete_volume(volume.id))
        wait_for("the tenant's volume", lambda: storage.get_volume(volume.id).status == "available")
        return volume.id

    def tag(self, project, server, metadata):
        member(self.members[project]).compute.set_server_metadata(server, **metadata)

    def tenant_boot(self, project, flavor_id):
        return member_boot(member(self.members[project]), flavor_id, self.image, self)

    def delete_volume(self, volume_id):
        storage = self.admin.block_storage
        wait_for("the volume to be deletable",
                 lambda: self.cloud.volume_status(volume_id) in ("available", "error", "missing"))
        storage.delete_volume(volume_id, ignore_missing=True)


@functools.cache
def member(cloud_name: str):
    """A member's own connection (a token of theirs, not the service's)."""
    return connect(cloud_name, CLOUDS)


def member_boot(member, flavor_id: str, image_id: str, rig, name: str = "contract-tenant") -> str | None:
    """A member's boot (no host, no network): the server id once ACTIVE, None when Nova
    refused the request or the server went to ERROR."""
    try:
        server = member.compute.create_server(name=f"{name}-{uuid.uuid4().hex[:6]}", flavor_id=flavor_id,
                                              image_id=image_id, networks="none")
    except sdk.HttpException:
        return None
    status = wait_for("the tenant's server to leave BUILD",
                      lambda: (s := member.compute.get_server(server.id).status) != "BUILD" and s)
    if status != "ACTIVE":   # refused: gone at once, as the simulated cloud never keeps one
        rig.delete(server.id)
        return None
    rig.cleanups.append(lambda: rig.delete(server.id))
    return server.id


@pytest.fixture
def rig(os_cloud, clean_cloud, projects, image_id):
    made = OpenStackRig(os_cloud, clean_cloud, projects, image_id)
    yield made
    made.close()

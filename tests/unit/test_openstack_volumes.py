"""The openstack driver's volume attach, against a stand-in of openstacksdk's compute and
block storage proxies: an attach that nova-compute failed is said at once, not after the
engine's pass waited volume_timeout seconds on it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.cloud.openstack import driver as os_driver
from gpu_tenancy.cloud.openstack.driver import OpenStackCloud
from gpu_tenancy.domain.failures import FailureClass as F


def cloud_with(statuses: list[str]) -> OpenStackCloud:
    """A driver whose volume shows `statuses` one read after another after the attach is asked
    (the last one for ever)."""
    seen = list(statuses)
    compute = SimpleNamespace(volume_attachments=lambda server_id: [],
                              create_volume_attachment=lambda server_id, volume_id: None)
    storage = SimpleNamespace(get_volume=lambda volume_id: SimpleNamespace(
        status=seen.pop(0) if len(seen) > 1 else seen[0]))
    d = object.__new__(OpenStackCloud)
    d.conns = SimpleNamespace(service=SimpleNamespace(compute=compute, block_storage=storage))
    d.volume_timeout = 300
    return d


@pytest.fixture
def sleeps(monkeypatch):
    slept: list[float] = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) > 20:
            raise AssertionError("the attach kept the engine's pass waiting on a volume back to available")
    monkeypatch.setattr(os_driver.time, "sleep", sleep)
    return slept


@pytest.mark.parametrize("after", ["available", "error"])
def test_an_attach_nova_compute_rolled_back_fails_at_once(sleeps, after):
    # Nova reserves the volume in its API (Cinder: reserved), then the compute attaches it; one it
    # fails there it rolls back (attachment deleted: available again). The loop waited for in-use
    # until volume_timeout (300 s), the engine's whole pass with it, every lease's start and end
    with pytest.raises(CloudError) as raised:
        cloud_with(["reserved", "attaching", after]).attach_volume("s1", "v1")
    assert raised.value.failure_class is F.VOLUME
    assert len(sleeps) <= 3


def test_an_attach_that_completes_returns(sleeps):
    cloud_with(["reserved", "attaching", "in-use"]).attach_volume("s1", "v1")
    assert len(sleeps) == 2

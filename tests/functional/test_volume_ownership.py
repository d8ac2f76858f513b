"""A lease's data volume is the project's, checked when the lease is asked for (and in a
dry run), failing closed when the cloud does not say whose a volume is; and tenants see a
failure's class and our message, operators the cloud's own words too (issue 15, finding 11)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import CloudError, VolumeRequest
from gpu_tenancy.cloud.openstack.driver import OpenStackCloud
from gpu_tenancy.domain.failures import FailureClass as F
from tests.conftest import headers
from tests.functional.test_dashboard import login
from tests.functional.test_errors import api_error

OPERATOR = headers("ml-vision", "admin", "olga")
SECRET = "compute-7.cell2 10.20.0.7 in project nlp-lab"    # what the cloud tells an admin


def ask(client, volume_id, dry_run=False, who=None):
    return client.post("/v1/leases", query_string={"dry_run": "true"} if dry_run else None, headers=who or headers(),
                       json={"shape": "a100.x1", "duration": "PT1H", "volume": {"id": volume_id}})


@pytest.mark.parametrize("dry_run", [False, True])
def test_another_projects_volume_or_none_is_refused_when_asked_for(client, cloud, dry_run):
    theirs = cloud.add_volume("nlp-lab", 30, "corpus")
    for volume_id in (theirs, "00000000-0000-0000-0000-000000000000"):
        error = api_error(ask(client, volume_id, dry_run), 400)
        assert error["code"] == "gpu_tenancy.unknown_volume" and volume_id in error["detail"]
    assert client.get("/v1/leases", headers=headers()).get_json()["leases"] == []
    own = cloud.add_volume("ml-vision", 20, "datasets")
    assert ask(client, own, dry_run).status_code == (200 if dry_run else 201)


def test_a_cloud_that_does_not_answer_is_a_503_with_its_words_for_operators_only(client, cloud):
    own = cloud.add_volume("ml-vision", 20)
    cloud.inject_failure("check_volume_owner", F.API_ERROR, times=2, message=SECRET)
    tenant = api_error(ask(client, own), 503)
    assert "api_error" in tenant["detail"] and SECRET not in tenant["detail"]
    assert SECRET in api_error(ask(client, own, who=OPERATOR), 503)["detail"]
    assert client.get("/v1/leases", headers=headers()).get_json()["leases"] == []
    assert ask(client, own).status_code == 201


@pytest.mark.parametrize("volume_id", ["detail?all_tenants=1", "../../os-quota-sets/nlp-lab", "detail",
                                       "00000000-0000-0000-0000-000000000000/metadata", "%2e%2e"])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_volume_id_that_is_no_volume_id_is_refused_before_the_cloud_is_asked(client, cloud, monkeypatch,
                                                                               volume_id, dry_run):
    """The id goes into the path of the cloud's request, made with the service's admin rights:
    openstacksdk joins it to /volumes/ as it is, and the '..' are resolved, so that any member
    had Cinder answer "detail?all_tenants=1" (every project's volumes) or any other of its paths."""
    asked: list[str] = []
    monkeypatch.setattr(cloud, "check_volume_owner", lambda project_id, vid: asked.append(vid))
    assert api_error(ask(client, volume_id, dry_run), 400)["code"] == "gpu_tenancy.invalid_input"
    assert asked == [] and client.get("/v1/leases", headers=headers()).get_json()["leases"] == []


class FakeCinder:
    def __init__(self, volumes: dict):
        self.volumes = volumes

    def get_volume(self, volume_id):
        if volume_id not in self.volumes:
            raise sdk.NotFoundException(f"Volume {volume_id} could not be found.")
        return self.volumes[volume_id]


@pytest.mark.parametrize("owner, owned", [("ml-vision", True), ("nlp-lab", False), (None, False)])
def test_the_openstack_driver_fails_closed_when_cinder_omits_the_project(owner, owned):
    """Cinder shows a volume's project only where its policy lets the caller see it: a
    volume without one is not taken to be the project's (it was, at boot, before)."""
    cinder = FakeCinder({"v1": SimpleNamespace(id="v1", project_id=owner, status="available",
                                               attachments=[], metadata={})})
    driver = object.__new__(OpenStackCloud)
    driver.conns = SimpleNamespace(service=SimpleNamespace(block_storage=cinder),
                                   project=lambda project_id: SimpleNamespace(block_storage=cinder))
    if owned:
        driver.check_volume_owner("ml-vision", "v1")
    else:
        with pytest.raises(CloudError) as refused:
            driver.check_volume_owner("ml-vision", "v1")
        assert refused.value.failure_class is F.VOLUME
        with pytest.raises(CloudError) as at_boot:       # the boot's own check fails closed too
            driver.ensure_volume("ml-vision", "lease-1", VolumeRequest(volume_id="v1"))
        assert at_boot.value.failure_class is F.VOLUME
    with pytest.raises(CloudError):
        driver.check_volume_owner("ml-vision", "missing")


def failed_lease(client, cloud, engine_tick, failure, message):
    cloud.inject_failure("server_error", failure, message=message)
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers())
    lease_id = lease.get_json()["lease"]["id"]
    engine_tick()
    engine_tick(advance=30)
    engine_tick(advance=10)
    return lease_id


def seen(client, lease_id, who) -> tuple[dict, str]:
    lease = client.get(f"/v1/leases/{lease_id}", headers=who).get_json()["lease"]
    events = client.get(f"/v1/leases/{lease_id}/events", headers=who).get_json()["events"]
    listed = client.get("/v1/leases", headers=who).get_json()["leases"]
    return lease, repr(lease) + repr(events) + repr([x for x in listed if x["id"] == lease_id])


def test_tenants_see_the_failure_class_and_our_message_operators_the_clouds_words(client, cloud, engine_tick):
    lease_id = failed_lease(client, cloud, engine_tick, F.IMAGE, f"Image could not be found on {SECRET}")
    lease, everything = seen(client, lease_id, headers())
    assert lease["status"] == "failed" and lease["failure"]["class"] == "image"
    assert lease["failure"]["message"].startswith("VM ") and lease["failure"]["message"].endswith("failed to boot")
    assert SECRET not in everything and "cloud said" not in everything
    assert lease["failures"][0]["user_message"] == "the image is missing or not active"
    operator, everything = seen(client, lease_id, OPERATOR)
    assert SECRET in operator["failure"]["message"] and SECRET in everything
    login(client)                                    # the dashboard's lease page shows what the API does
    page = client.get(f"/dashboard/leases/{lease_id}").text
    assert "image" in page and SECRET not in page


@pytest.mark.parametrize("text", [f"connection to postgresql://gt:hunter2@{SECRET} refused",
                                  f"pool timed out; dsn=postgresql://gt:hunter2@{SECRET}\nsecond line"])
def test_the_text_of_an_internal_error_is_the_operators(client, cloud, engine_tick, monkeypatch, text):
    """Whatever it holds: a "; " in it ended what a tenant's view cut out."""
    def boot(request):
        raise RuntimeError(text)
    monkeypatch.setattr(cloud, "boot", boot)
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers())
    lease_id = lease.get_json()["lease"]["id"]
    engine_tick()
    engine_tick(advance=30)
    shown, everything = seen(client, lease_id, headers())
    assert shown["failure"]["class"] == "internal" and shown["failure"]["message"] == "internal error"
    assert "hunter2" not in everything
    assert "hunter2" in seen(client, lease_id, OPERATOR)[0]["failure"]["message"]

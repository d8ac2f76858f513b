"""/v1/volumes: a project's volumes as the cloud has them, beside the leases that
use them, so a tenant can pick a free one for a new lease."""
from __future__ import annotations

from gpu_tenancy import app as app_module
from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config
from gpu_tenancy.domain.failures import FailureClass
from tests.conftest import headers


def listed(client, project="ml-vision", **query):
    reply = client.get("/v1/volumes", query_string=query, headers=headers(project))
    assert reply.status_code == 200, reply.get_json()
    return {v["id"]: v for v in reply.get_json()["volumes"]}


def test_a_project_sees_its_own_volumes_and_which_lease_uses_each(client, cloud, engine_tick):
    own = cloud.add_volume("ml-vision", 20, "datasets")
    theirs = cloud.add_volume("nlp-lab", 30, "corpus")
    shown = listed(client)
    assert set(shown) == {own}
    assert shown[own] == {"id": own, "name": "datasets", "size_gb": 20, "status": "available", "attached_to": [],
                          "made_by_lease": None, "lease_id": None, "free_for_a_lease": True}
    assert set(listed(client, "nlp-lab")) == {theirs}

    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "volume": {"id": own}},
                        headers=headers()).get_json()["lease"]
    assert listed(client)[own]["lease_id"] == lease["id"]
    assert listed(client)[own]["free_for_a_lease"] is False          # named by a lease not yet started
    engine_tick()
    engine_tick(advance=30)
    server = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["servers"][0]["id"]
    attached = listed(client)[own]
    assert attached["status"] == "in-use" and attached["attached_to"] == [server]
    client.delete(f"/v1/leases/{lease['id']}", headers=headers())
    engine_tick(advance=10)
    engine_tick(advance=10)
    after = listed(client)[own]
    assert after["status"] == "available" and after["lease_id"] is None and after["free_for_a_lease"] is True


def test_a_volume_a_lease_made_says_so(client, cloud, engine_tick):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "volume": {"size_gb": 50}},
                        headers=headers()).get_json()["lease"]
    assert listed(client) == {}                                        # made when the lease starts
    engine_tick()
    engine_tick(advance=30)
    [made] = listed(client).values()
    assert made["made_by_lease"] == lease["id"] and made["lease_id"] == lease["id"] and made["size_gb"] == 50


def test_admins_list_any_project_and_others_may_not(client, cloud):
    own = cloud.add_volume("ml-vision", 20)
    admin = client.get("/v1/volumes?project_id=ml-vision", headers=headers("admin-project", "admin", "olga"))
    assert admin.status_code == 200 and [v["id"] for v in admin.get_json()["volumes"]] == [own]
    other = client.get("/v1/volumes?project_id=ml-vision", headers=headers("nlp-lab"))
    assert other.status_code == 403 and other.get_json()["errors"][0]["code"] == "gpu_tenancy.policy"
    bad = client.get("/v1/volumes?project_id=a/b", headers=headers("admin-project", "admin", "olga"))
    assert bad.status_code == 400


def test_a_cloud_that_does_not_answer_is_a_503_in_the_openstack_form(client, cloud):
    """The cloud's own words (read with the service's admin rights) are the operators'."""
    cloud.inject_failure("project_volumes", FailureClass.API_ERROR, times=2, message="Service Unavailable (HTTP 503)")
    reply = client.get("/v1/volumes", headers=headers())
    assert reply.status_code == 503
    [error] = reply.get_json()["errors"]
    assert error["code"] == "gpu_tenancy.cloud_unavailable" and "HTTP 503" not in error["detail"]
    admin = client.get("/v1/volumes?project_id=ml-vision", headers=headers("admin-project", "admin", "olga"))
    assert admin.status_code == 503 and "HTTP 503" in admin.get_json()["errors"][0]["detail"]
    assert client.get("/v1/volumes", headers=headers()).status_code == 200   # only that call failed


def test_an_api_only_worker_makes_its_own_driver_to_list_volumes(app, db_url, clock, monkeypatch):
    """Production API workers run no engine, so no driver was built for them: the
    listing must build one (it answered 500 under keystone auth in the loopback test)."""
    made = []
    real = app_module.make_cloud
    monkeypatch.setattr(app_module, "make_cloud", lambda config, clock: made.append(1) or real(config, clock))
    worker = create_app(Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=False), clock=clock)
    client = worker.test_client()
    for _ in range(2):
        reply = client.get("/v1/volumes", headers=headers())
        assert reply.status_code == 200 and reply.get_json()["volumes"] == []
    assert made == [1]                                                  # once, then kept
    worker.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()

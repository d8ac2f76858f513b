"""Shapes, images, quotas, capacity (with its calendar) and usage through the API."""
from __future__ import annotations

import pytest

from gpu_tenancy.db import models as m
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import RELEASE, T0, headers

HOUR = 3600
ADMIN = headers("ml-vision", "admin")
MEMBER = headers("ml-vision", "member")
NEW_SHAPE = {"name": "a100.x3", "gpu_model": "A100", "gpus": 3, "vcpus": 36, "ram_mb": 368640,
             "disk_gb": 150, "pci_alias": "a100"}


def ok(response, status=200):
    assert response.status_code == status, response.get_json()
    return response.get_json()


def error_code(response, status):
    assert response.status_code == status, response.get_json()
    return response.get_json()["errors"][0]["code"]


def lease(client, project="ml-vision", **body):
    body = {"shape": "a100.x2", "duration": "PT1H", **body}
    return ok(client.post("/v1/leases", json=body, headers=headers(project)), 201)["lease"]


def show_lease(client, lease_id, project="ml-vision"):
    return ok(client.get(f"/v1/leases/{lease_id}", headers=headers(project)))["lease"]


# --- shapes -------------------------------------------------------------------------------

def test_everyone_sees_the_shapes_on_offer(client):
    shapes = ok(client.get("/v1/shapes", headers=headers(roles="reader")))["shapes"]
    assert [s["name"] for s in shapes][:2] == ["a100.x1", "a100.x2"]
    x4 = ok(client.get("/v1/shapes/a100.x4", headers=MEMBER))["shape"]
    assert (x4["gpu_model"], x4["gpus"], x4["pci_alias"], x4["retired_at"]) == ("A100", 4, "a100", None)
    assert x4["links"][0]["href"].endswith("/v1/shapes/a100.x4")


def test_an_admin_adds_a_shape_and_tenants_can_lease_it(client):
    response = client.post("/v1/shapes", json=NEW_SHAPE, headers=ADMIN)
    shape = ok(response, 201)["shape"]
    assert response.headers["Location"].endswith("/v1/shapes/a100.x3")
    assert {k: shape[k] for k in NEW_SHAPE} == NEW_SHAPE
    assert lease(client, shape="a100.x3")["gpus_per_instance"] == 3


def test_a_shape_name_is_never_reused(client):
    assert error_code(client.post("/v1/shapes", json={**NEW_SHAPE, "name": "a100.x4"}, headers=ADMIN),
                      409) == "gpu_tenancy.shape_exists"
    ok(client.delete("/v1/shapes/a100.x4", headers=ADMIN))
    response = client.post("/v1/shapes", json={**NEW_SHAPE, "name": "a100.x4"}, headers=ADMIN)
    assert response.status_code == 409 and "retired" in response.get_json()["errors"][0]["detail"]


@pytest.mark.parametrize("change", [{"name": "A100 big"}, {"name": "-x"}, {"name": "x" * 65}, {"gpus": 0},
                                    {"gpus": 17}, {"vcpus": "8"}, {"colour": "red"}, {"pci_alias": ""}])
def test_a_bad_shape_is_refused_with_the_field_named(client, change):
    response = client.post("/v1/shapes", json={**NEW_SHAPE, **change}, headers=ADMIN)
    assert response.status_code == 400
    assert next(iter(change)) in response.get_json()["errors"][0]["detail"]


def test_retiring_a_shape_stops_new_leases_but_running_ones_keep_going(client, engine_tick):
    running = lease(client, shape="a100.x1")
    engine_tick()
    engine_tick(30)
    body = ok(client.delete("/v1/shapes/a100.x1", headers=ADMIN))
    assert body["shape"]["retired_at"] == rfc3339(T0 + 30)
    assert "1 unfinished lease(s)" in body["message"] and "keep it until they end" in body["message"]

    assert "a100.x1" not in [s["name"] for s in ok(client.get("/v1/shapes", headers=MEMBER))["shapes"]]
    listed = ok(client.get("/v1/shapes?include_retired=true", headers=ADMIN))["shapes"]
    assert "a100.x1" in [s["name"] for s in listed]
    assert ok(client.get("/v1/shapes/a100.x1", headers=MEMBER))["shape"]["retired_at"] is not None
    refused = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=MEMBER)
    assert error_code(refused, 400) == "gpu_tenancy.unknown_shape"

    engine_tick(60)
    assert show_lease(client, running["id"])["status"] == "active"
    assert error_code(client.delete("/v1/shapes/a100.x1", headers=ADMIN), 409) == "gpu_tenancy.shape_retired"


def test_unknown_shapes_are_404(client):
    assert error_code(client.get("/v1/shapes/v100.x1", headers=MEMBER), 404) == "gpu_tenancy.shape_not_found"
    assert error_code(client.delete("/v1/shapes/v100.x1", headers=ADMIN), 404) == "gpu_tenancy.shape_not_found"


# --- images -------------------------------------------------------------------------------

def test_the_standard_image_catalog(client):
    images = ok(client.get("/v1/images", headers=MEMBER))["images"]
    assert "ubuntu-22.04-cuda-12" in [i["name"] for i in images]
    new = {"name": "debian-12-cuda-12", "cloud_ref": "7d3c0c8e-0000-4000-8000-000000000001",
           "description": "Debian 12, CUDA 12.4"}
    response = client.post("/v1/images", json=new, headers=ADMIN)
    image = ok(response, 201)["image"]
    assert {k: image[k] for k in new} == new and response.headers["Location"].endswith("/v1/images/debian-12-cuda-12")
    assert error_code(client.post("/v1/images", json=new, headers=ADMIN), 409) == "gpu_tenancy.image_exists"
    assert ok(client.get("/v1/images/debian-12-cuda-12", headers=MEMBER))["image"] == image
    assert lease(client, image="debian-12-cuda-12")["image"] == "debian-12-cuda-12"


def test_an_image_without_description_gets_an_empty_one(client):
    image = ok(client.post("/v1/images", json={"name": "bare", "cloud_ref": "abc"}, headers=ADMIN), 201)["image"]
    assert image["description"] == ""


def test_retiring_an_image_keeps_it_for_the_leases_that_chose_it(client):
    chosen = lease(client, image="rocky-9-cuda-12")
    body = ok(client.delete("/v1/images/rocky-9-cuda-12", headers=ADMIN))
    assert "1 unfinished lease(s)" in body["message"]
    assert "rocky-9-cuda-12" not in [i["name"] for i in ok(client.get("/v1/images", headers=MEMBER))["images"]]
    refused = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "image": "rocky-9-cuda-12"},
                          headers=MEMBER)
    assert error_code(refused, 400) == "gpu_tenancy.unknown_image"
    assert show_lease(client, chosen["id"])["image"] == "rocky-9-cuda-12"


def test_bad_images_are_refused(client):
    assert client.post("/v1/images", json={"name": "x"}, headers=ADMIN).status_code == 400
    assert client.post("/v1/images", json={"name": "x", "cloud_ref": "has space"}, headers=ADMIN).status_code == 400
    assert error_code(client.get("/v1/images/nope", headers=MEMBER), 404) == "gpu_tenancy.image_not_found"


# --- quotas -------------------------------------------------------------------------------

def test_a_project_reads_its_own_quota(client):
    quota = ok(client.get("/v1/quotas/ml-vision", headers=headers(roles="reader")))["quota"]
    assert quota == {"project_id": "ml-vision", "gpu_models": {
        "A100": {"gpus": 16, "borrow_gpus": 8, "max_duration": 7 * 86400, "weight": 1.0},
        "H100": {"gpus": 4, "borrow_gpus": 0, "max_duration": 2 * 86400, "weight": 1.0}}}
    listed = ok(client.get("/v1/quotas", headers=MEMBER))["quotas"]
    assert [q["project_id"] for q in listed] == ["ml-vision"]


def test_an_admin_lists_every_projects_quota_or_one(client):
    assert [q["project_id"] for q in ok(client.get("/v1/quotas", headers=ADMIN))["quotas"]] == ["ml-vision",
                                                                                                  "nlp-lab"]
    assert [q["project_id"] for q in ok(client.get("/v1/quotas?project_id=nlp-lab",
                                                   headers=ADMIN))["quotas"]] == ["nlp-lab"]


def test_a_project_without_quota_has_no_gpu_models(client):
    assert ok(client.get("/v1/quotas/astro", headers=ADMIN))["quota"] == {"project_id": "astro", "gpu_models": {}}


def test_put_replaces_the_models_given_and_leaves_the_others(client):
    body = {"quota": {"gpu_models": {"A100": {"gpus": 24, "max_duration": "P3D", "weight": 2.5}}}}
    quota = ok(client.put("/v1/quotas/ml-vision", json=body, headers=ADMIN))["quota"]
    # borrow_gpus was not given: it takes its default (0), not the old 8
    assert quota["gpu_models"]["A100"] == {"gpus": 24, "borrow_gpus": 0, "max_duration": 3 * 86400, "weight": 2.5}
    assert quota["gpu_models"]["H100"]["gpus"] == 4
    assert ok(client.get("/v1/quotas/ml-vision", headers=MEMBER))["quota"] == quota
    no_limit = {"quota": {"project_id": "ml-vision", "gpu_models": {"A100": {"gpus": 24, "max_duration": None}}}}
    assert ok(client.put("/v1/quotas/ml-vision", json=no_limit,
                         headers=ADMIN))["quota"]["gpu_models"]["A100"]["max_duration"] is None


def test_patch_changes_only_the_limits_given_onto_those_stored(client):
    """`openstack gpu quota set` read a model's limits and PUT them back with its change: an
    admin's change committed in between was lost. PATCH merges onto the stored limits."""
    body = {"quota": {"gpu_models": {"A100": {"gpus": 24, "borrow_gpus": 4, "max_duration": "P3D"}}}}
    ok(client.put("/v1/quotas/ml-vision", json=body, headers=ADMIN))
    weight = {"quota": {"gpu_models": {"A100": {"weight": 2.5}}}}
    quota = ok(client.patch("/v1/quotas/ml-vision", json=weight, headers=ADMIN))["quota"]
    assert quota["gpu_models"]["A100"] == {"gpus": 24, "borrow_gpus": 4, "max_duration": 3 * 86400, "weight": 2.5}
    gpus = {"quota": {"gpu_models": {"A100": {"gpus": 8, "max_duration": None}}}}
    quota = ok(client.patch("/v1/quotas/ml-vision", json=gpus, headers=ADMIN))["quota"]
    assert quota["gpu_models"]["A100"] == {"gpus": 8, "borrow_gpus": 4, "max_duration": None, "weight": 2.5}
    assert quota["gpu_models"]["H100"]["gpus"] == 4
    assert ok(client.get("/v1/quotas/ml-vision", headers=ADMIN))["quota"] == quota


@pytest.mark.parametrize("limits, status, fragment", [
    ({"weight": 2}, 400, "has no A100 quota yet: give its gpus"), ({}, 400, "A100"),
    ({"gpus": 1, "extra": 1}, 400, "extra")])
def test_patch_refuses_a_new_models_limits_without_gpus_and_empty_limits(client, limits, status, fragment):
    response = client.patch("/v1/quotas/astro", json={"quota": {"gpu_models": {"A100": limits}}}, headers=ADMIN)
    assert response.status_code == status and fragment in response.get_json()["errors"][0]["detail"]
    assert ok(client.get("/v1/quotas/astro", headers=ADMIN))["quota"]["gpu_models"] == {}
    member = client.patch("/v1/quotas/ml-vision", json={"quota": {"gpu_models": {"A100": {"gpus": 99}}}},
                          headers=MEMBER)
    assert error_code(member, 403)


def test_a_new_project_gets_a_quota_and_can_lease(client):
    refused = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers("astro"))
    assert error_code(refused, 403) == "gpu_tenancy.no_quota"
    ok(client.put("/v1/quotas/astro", json={"quota": {"gpu_models": {"A100": {"gpus": 2}}}}, headers=ADMIN))
    assert lease(client, "astro", shape="a100.x1")["status"] == "scheduled"


def test_raising_a_quota_replans_the_waiting_leases_at_once(client):
    ok(client.put("/v1/quotas/ml-vision", json={"quota": {"gpu_models": {"A100": {"gpus": 2}}}}, headers=ADMIN))
    lease(client)
    waiting = lease(client)
    assert waiting["status"] == "queued"
    assert any(r["code"] == "quota" for r in waiting["queue"]["reasons"])
    ok(client.put("/v1/quotas/ml-vision", json={"quota": {"gpu_models": {"A100": {"gpus": 4}}}}, headers=ADMIN))
    assert show_lease(client, waiting["id"])["status"] == "scheduled"


@pytest.mark.parametrize("limits, fragment", [
    ({"gpus": -1}, "gpus"), ({"gpus": 100001}, "gpus"), ({"gpus": 1, "weight": 0}, "weight"),
    ({"gpus": 1, "weight": -2}, "weight"), ({"borrow_gpus": 1}, "gpus"), ({"gpus": 1, "max_duration": "soon"},
                                                                          "max_duration"),
    ({"gpus": 1, "max_duration": 0}, "max_duration"), ({"gpus": "4"}, "gpus"), ({"gpus": 1, "extra": 1}, "extra"),
])
def test_bad_quota_values_are_refused(client, limits, fragment):
    response = client.put("/v1/quotas/ml-vision", json={"quota": {"gpu_models": {"A100": limits}}}, headers=ADMIN)
    assert response.status_code == 400
    assert fragment in response.get_json()["errors"][0]["detail"]
    assert ok(client.get("/v1/quotas/ml-vision", headers=ADMIN))["quota"]["gpu_models"]["A100"]["gpus"] == 16


@pytest.mark.parametrize("method, limits", [("put", {"gpus": 1}), ("patch", {"weight": 2})])
def test_a_quota_for_an_unknown_gpu_model_names_the_known_ones(client, method, limits):
    response = getattr(client, method)("/v1/quotas/ml-vision", json={"quota": {"gpu_models": {"a100": limits}}},
                                       headers=ADMIN)
    assert error_code(response, 400) == "gpu_tenancy.unknown_gpu_model"
    assert "A100, H100" in response.get_json()["errors"][0]["detail"]


def test_a_quota_body_for_another_project_is_refused(client):
    body = {"quota": {"project_id": "nlp-lab", "gpu_models": {"A100": {"gpus": 1}}}}
    assert error_code(client.put("/v1/quotas/ml-vision", json=body, headers=ADMIN), 400) == \
        "gpu_tenancy.project_mismatch"


# --- capacity -----------------------------------------------------------------------------

def test_capacity_now_per_gpu_model(client, sessions, engine_tick):
    with sessions.begin() as s:
        s.get(m.Host, "gpu-a100-4").drained = True
    lease(client, shape="a100.x4", duration="PT2H")
    lease(client, "nlp-lab", shape="h100.x4", duration="PT2H")
    lease(client, "nlp-lab", shape="h100.x4", duration="PT2H")
    waiting = lease(client, "nlp-lab", shape="h100.x4", duration="PT2H")
    assert waiting["status"] == "queued"
    engine_tick()
    body = ok(client.get("/v1/capacity", headers=headers(roles="reader")))["capacity"]
    assert body["now"] == rfc3339(T0) and "calendar" not in body
    assert body["gpu_models"]["A100"] == {"hosts": 4, "hosts_in_service": 3, "gpus": 32, "in_use": 4, "free": 20,
                                          "largest_free_block": 8, "waiting_leases": 0}
    assert body["gpu_models"]["H100"] == {"hosts": 2, "hosts_in_service": 2, "gpus": 8, "in_use": 8, "free": 0,
                                          "largest_free_block": 0, "waiting_leases": 1}


def test_capacity_calendar_is_a_step_function_per_host(client):
    now_lease = lease(client, shape="a100.x4", duration="PT2H")
    later = lease(client, shape="a100.x8", duration="PT1H", start=rfc3339(T0 + HOUR))
    first_host = now_lease["allocations"][0]["host"]
    later_host = later["allocations"][0]["host"]
    assert first_host != later_host
    body = ok(client.get(f"/v1/capacity?start={rfc3339(T0)}&end={rfc3339(T0 + 4 * HOUR)}",
                         headers=MEMBER))["capacity"]
    calendar = {h["host"]: h for h in body["calendar"]}
    assert len(calendar) == 6 and calendar[first_host]["gpu_model"] == "A100" and calendar[first_host]["gpus"] == 8
    assert calendar[first_host]["free"] == [
        {"from": rfc3339(T0), "to": rfc3339(T0 + 2 * HOUR + RELEASE), "free": 4, "planned": 0},
        {"from": rfc3339(T0 + 2 * HOUR + RELEASE), "to": rfc3339(T0 + 4 * HOUR), "free": 8, "planned": 0}]
    assert calendar[later_host]["free"] == [
        {"from": rfc3339(T0), "to": rfc3339(T0 + HOUR), "free": 8, "planned": 0},
        {"from": rfc3339(T0 + HOUR), "to": rfc3339(T0 + 2 * HOUR + RELEASE), "free": 0, "planned": 0},
        {"from": rfc3339(T0 + 2 * HOUR + RELEASE), "to": rfc3339(T0 + 4 * HOUR), "free": 8, "planned": 0}]
    assert calendar["gpu-h100-1"]["free"] == [{"from": rfc3339(T0), "to": rfc3339(T0 + 4 * HOUR), "free": 4, "planned": 0}]


@pytest.mark.parametrize("query, fragment", [
    (f"start={rfc3339(T0)}", "both start and end"),
    (f"start={rfc3339(T0)}&end={rfc3339(T0)}", "after start"),
    (f"start={rfc3339(T0)}&end={rfc3339(T0 + 91 * 86400)}", "90 days"),
    ("start=tomorrow&end=2026-12-03T00:00:00Z", "RFC 3339"),
    ("start=2026-12-01T00:00:00&end=2026-12-03T00:00:00Z", "time zone"),
])
def test_a_bad_calendar_window_is_refused(client, query, fragment):
    response = client.get("/v1/capacity?" + query, headers=MEMBER)
    assert error_code(response, 400) == "gpu_tenancy.invalid_query"
    assert fragment in response.get_json()["errors"][0]["detail"]


# --- usage --------------------------------------------------------------------------------

def usage_of(client, query="", who=MEMBER) -> dict:
    body = ok(client.get("/v1/usage" + query, headers=who))["usage"]
    return {p["project_id"]: {model: v["gpu_hours"] for model, v in p["gpu_models"].items()}
            for p in body["projects"]}


def test_usage_counts_gpu_hours_held_up_to_now(client, engine_tick):
    full = lease(client, shape="a100.x2", duration="PT2H")           # 2 GPUs x 2 h
    cut = lease(client, shape="a100.x4", duration="PT4H")            # 4 GPUs, ended by the user after 30 min
    other = lease(client, "nlp-lab", shape="h100.x1", duration="PT3H")  # 1 GPU x 3 h
    engine_tick()
    engine_tick(30)
    assert show_lease(client, full["id"])["status"] == "active"

    engine_tick(HOUR - 30)                                           # T0 + 1 h: the future does not count
    assert usage_of(client) == {"ml-vision": {"A100": 2 * 1 + 4 * 1}}

    ok(client.delete(f"/v1/leases/{cut['id']}", headers=MEMBER), 204)  # at T0 + 1 h: 4 GPU-hours held
    for _ in range(4):
        engine_tick(HOUR)                                            # to T0 + 5 h: every lease ended
    assert show_lease(client, full["id"])["status"] == "ended"
    assert show_lease(client, cut["id"])["status"] == "ended"
    assert show_lease(client, other["id"], "nlp-lab")["status"] == "ended"

    assert usage_of(client) == {"ml-vision": {"A100": 2 * 2 + 4 * 1}}
    assert usage_of(client, who=ADMIN) == {"ml-vision": {"A100": 8.0}, "nlp-lab": {"H100": 3.0}}
    assert usage_of(client, "?project_id=nlp-lab", who=ADMIN) == {"nlp-lab": {"H100": 3.0}}
    # a window clips: from T0 + 30 min to T0 + 2 h 30 min
    window = f"?start={rfc3339(T0 + HOUR // 2)}&end={rfc3339(T0 + 5 * HOUR // 2)}"
    assert usage_of(client, window) == {"ml-vision": {"A100": 2 * 1.5 + 4 * 0.5}}
    assert usage_of(client, window, who=ADMIN)["nlp-lab"] == {"H100": 2.0}


def test_usage_defaults_to_the_last_30_days(client):
    body = ok(client.get("/v1/usage", headers=MEMBER))["usage"]
    assert body == {"start": rfc3339(T0 - 30 * 86400), "end": rfc3339(T0), "currency": None, "rated_total": None,
                    "projects": [{"project_id": "ml-vision", "gpu_models": {}, "rated_total": None, "users": [],
                                  "budgets": []}]}
    body = ok(client.get(f"/v1/usage?end={rfc3339(T0 - 86400)}", headers=MEMBER))["usage"]
    assert body["start"] == rfc3339(T0 - 31 * 86400)


def test_cancelled_leases_never_count(client, engine_tick):
    waiting = lease(client, shape="a100.x2", start=rfc3339(T0 + HOUR))
    ok(client.delete(f"/v1/leases/{waiting['id']}", headers=MEMBER), 204)
    engine_tick(3 * HOUR)
    assert usage_of(client, who=ADMIN) == {}


def test_a_project_sees_only_its_own_usage(client):
    assert error_code(client.get("/v1/usage?project_id=nlp-lab", headers=MEMBER), 403) == "gpu_tenancy.policy"
    assert ok(client.get("/v1/usage?project_id=ml-vision", headers=MEMBER))["usage"]["projects"][0][
        "project_id"] == "ml-vision"

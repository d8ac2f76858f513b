"""The lease commands read at the API boundary (api/lease_commands.py): a value that is
not a time, a duration or a flag is a 400 naming it, before anything is made."""
from __future__ import annotations

import pytest

from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import headers
from tests.functional.test_errors import api_error


def lease_count(client) -> int:
    return len(client.get("/v1/leases?all_projects=true", headers=headers(roles="admin")).get_json()["leases"])


@pytest.mark.parametrize("body, code, field", [
    ({"shape": "a100.x8", "duration": "a while"}, "gpu_tenancy.bad_duration", "duration"),
    ({"shape": "a100.x8", "duration": "PT1H", "start": "tomorrow"}, "gpu_tenancy.bad_time", "start"),
    ({"shape": "a100.x8", "duration": "PT1H", "latest_start": "2026-12-01T10:00:00"}, "gpu_tenancy.bad_time",
     "latest_start"),
])
def test_a_create_with_a_time_or_duration_that_is_not_one_makes_nothing(client, body, code, field):
    before = lease_count(client)
    for query in ("", "?dry_run=true"):
        error = api_error(client.post(f"/v1/leases{query}", json=body, headers=headers()), 400)
        assert error["code"] == code and error["detail"].startswith(f"{field}: ")
    assert lease_count(client) == before


@pytest.mark.parametrize("url", ["/v1/leases?dry_run=maybe", "/v1/leases?dry_run="])
def test_dry_run_is_true_or_false(client, url):
    error = api_error(client.post(url, json={"shape": "a100.x8", "duration": "PT1H"}, headers=headers()), 400)
    assert error["code"] == "gpu_tenancy.invalid_query" and "dry_run" in error["detail"]


@pytest.mark.parametrize("value, status", [("true", 200), ("1", 200), ("false", 200), ("0", 200), ("maybe", 400)])
def test_all_projects_is_read_as_the_other_flags_are(client, value, status):
    reply = client.get(f"/v1/leases?all_projects={value}", headers=headers(roles="admin"))
    assert reply.status_code == status
    if status == 400:
        assert api_error(reply, 400)["code"] == "gpu_tenancy.invalid_query"


def test_an_end_before_the_lease_starts_is_a_400_in_rfc3339(client):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT2H", "start": "2026-12-03T00:00:00Z"},
                        headers=headers()).get_json()["lease"]
    error = api_error(client.patch(f"/v1/leases/{lease['id']}", json={"end": "2026-12-02T23:00:00+00:00"},
                                   headers=headers()), 400)
    assert error["code"] == "gpu_tenancy.bad_end"
    assert error["detail"] == "end 2026-12-02T23:00:00Z is not after the lease's start 2026-12-03T00:00:00Z"
    assert api_error(client.patch(f"/v1/leases/{lease['id']}", json={"duration": "2 days"}, headers=headers()),
                     400)["code"] == "gpu_tenancy.bad_duration"


def test_every_field_a_lease_is_asked_with_shows_in_its_answer(client, runtime):
    """The add-a-lease-field checklist's last place: the engine keeps what the ask carries.
    A lease asked with every field the answer shows differs, in each of those keys, from a
    lease asked with none of them (a field read into LeaseAsk but not stored answers its default)."""
    from tests.unit.test_lease_ask import KEPT_AND_SHOWN

    runtime.config.readiness_url = "http://127.0.0.1:8779"   # only read into the probe's address
    admin = headers(roles="admin")
    image = [i["name"] for i in client.get("/v1/images", headers=admin).get_json()["images"]
             if not i.get("default")][0]
    priority_class = client.get("/v1/priority_classes", headers=admin).get_json()["priority_classes"][0]["name"]
    every = {"name": "every-field", "shape": "a100.x1", "instances": 2, "duration": "PT3H",
             "start": "2026-12-01T12:00:00Z", "latest_start": "2026-12-01T13:00:00Z", "image": image,
             "volume": {"size_gb": 20}, "key_name": "mine", "user_data": "#cloud-config",
             "priority_class": priority_class, "readiness_probe": True, "network": "ml-vision-net",
             "floating_ip": True,}
    shown_by_service_boot = {name: shown for name, (_, shown) in KEPT_AND_SHOWN.items()
                             if shown is not None and name != "boot"}
    bare = {"shape": "a100.x1", "duration": "PT2H"}
    asks = [every, {**bare, "priority": 7}]   # a priority is given without a class, not with one
    assert set(shown_by_service_boot) <= set(every) | set(asks[1]), "a field the answer shows is not asked here"

    def made(body: dict) -> dict:
        reply = client.post("/v1/leases", json=body, headers=admin)
        assert reply.status_code == 201, reply.get_json()
        return reply.get_json()["lease"]
    default = made(bare)
    for ask in asks:
        lease = made(ask)
        for name, shown in shown_by_service_boot.items():
            if name in ask and name not in bare:
                assert lease[shown] != default[shown], f"{name} asked for but not kept: {shown}={lease[shown]!r}"


def test_a_new_end_of_a_queued_lease_is_the_end_its_answer_shows(client):
    """A queued lease shows the start and end the queue plans; a PATCH of its end to an hour
    after the end it was shown makes it an hour longer, and the answer shows that end (not a
    duration read from its asked start, a day before its planned one)."""
    full = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT24H"}, headers=headers())
    assert full.status_code == 201 and full.get_json()["lease"]["status"] == "scheduled"
    lease = client.post("/v1/leases", json={"shape": "h100.x1", "duration": "PT2H"},
                        headers=headers()).get_json()["lease"]
    assert lease["status"] == "queued" and lease["start"] > lease["requested_start"]
    end = rfc3339(parse_time(lease["end"]) + 3600)
    moved = client.patch(f"/v1/leases/{lease['id']}", json={"end": end}, headers=headers())
    assert moved.status_code == 200, moved.get_json()
    assert (moved.get_json()["lease"]["duration"], moved.get_json()["lease"]["end"]) == (3 * 3600, end)

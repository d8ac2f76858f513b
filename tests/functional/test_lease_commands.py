"""The lease commands read at the API boundary (api/lease_commands.py): a value that is
not a time, a duration or a flag is a 400 naming it, before anything is made."""
from __future__ import annotations

import pytest

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

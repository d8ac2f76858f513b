"""/v1/share with the queued charge on (planner_queued_charge): the rank is the one the
planner gives each project's next lease, its charge counted, and the row shows that charge."""
from __future__ import annotations

import re

import pytest

from gpu_tenancy.config import Config
from tests.conftest import headers
from tests.functional.test_dashboard import login
from tests.functional.test_openapi import response_validator

ADMIN = headers("ops", "admin", user="operator")


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, planner_queued_charge=4)


def test_a_project_holding_gpus_from_now_on_ranks_after_one_that_holds_none(client):
    """Neither has used GPUs yet (same score): ml-vision, holding 16 for 2 h from now, is
    charged 4 x 32 GPU-hours for its next lease, so nlp-lab's goes first."""
    got = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H"},
                      headers=headers("ml-vision", "member"))
    assert got.status_code == 201 and got.get_json()["lease"]["status"] == "scheduled"
    body = client.get("/v1/share?gpu_model=A100", headers=ADMIN).get_json()
    response_validator(client.get("/v1/openapi.json").get_json(), "/v1/share", "get", 200).validate(body)
    rows = {r["project"]: r for r in body["share"]["projects"]}
    assert (rows["nlp-lab"]["rank"], rows["nlp-lab"]["score"], rows["nlp-lab"]["queued_charge"]) == (1, 0, 0)
    assert (rows["ml-vision"]["rank"], rows["ml-vision"]["score"]) == (2, 0)
    assert rows["ml-vision"]["queued_charge"] == pytest.approx(4 * 32 / rows["ml-vision"]["weight"], rel=1e-3)


def test_the_dashboards_share_page_shows_the_charge(client):
    got = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H"},
                      headers=headers("ml-vision", "member"))
    assert got.status_code == 201, got.get_json()
    login(client, roles=("admin",))
    html = client.get("/dashboard/share").text
    assert "With the queued charge on" in html
    assert re.search(r"\+ 128\.\d{3} charged", html)   # 4 x 32 GPU-hours, and the release allowance's

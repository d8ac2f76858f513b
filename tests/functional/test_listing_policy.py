"""Which projects' leases a listing shows is the policy's lease:list:all_projects, as the
operator sets it: not whether the caller is an admin (the native and the Blazar listing)."""
from __future__ import annotations

import pytest

from gpu_tenancy.config import Config
from tests.conftest import headers

AUDITOR = headers("ml-vision", "reader,auditor", user="auditor")
ADMIN = headers("ml-vision", "admin", user="ops")


@pytest.fixture
def config(db_url, tmp_path):
    policy = tmp_path / "policy.yaml"
    # the operator's: admins see their project's leases only; an auditor role sees every project's
    policy.write_text('"lease:list:all_projects": "role:auditor"\n')
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, policy_file=str(policy))


@pytest.fixture
def theirs(client) -> str:
    made = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers("nlp-lab"))
    assert made.status_code == 201
    return made.get_json()["lease"]["id"]


def listed(reply) -> list[str]:
    assert reply.status_code == 200, reply.get_json()
    return [lease["id"] for lease in reply.get_json()["leases"]]


def test_an_admin_the_rule_leaves_out_is_refused_every_projects_listing(client, theirs):
    for query in ("?all_projects=true", "?project_id=nlp-lab"):
        assert client.get(f"/v1/leases{query}", headers=ADMIN).status_code == 403
    assert theirs not in listed(client.get("/reservation/v1/leases", headers=ADMIN))


def test_a_role_the_rule_grants_sees_every_project_as_asked(client, theirs):
    assert theirs in listed(client.get("/v1/leases?all_projects=true", headers=AUDITOR))
    assert listed(client.get("/v1/leases?project_id=nlp-lab", headers=AUDITOR)) == [theirs]
    assert theirs not in listed(client.get("/v1/leases", headers=AUDITOR))   # its own project's by default
    assert theirs in listed(client.get("/reservation/v1/leases", headers=AUDITOR))


def test_a_project_named_with_all_projects_narrows_the_listing(client, theirs):
    """Found by tests/property/test_lease_pages_property.py. `openstack gpu lease list
    --all-projects --project nlp-lab` sends both. Before: all_projects won and every project's
    leases were listed (and another project's lease taken as the marker)."""
    ours = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers("ml-vision"))
    assert ours.status_code == 201
    assert listed(client.get("/v1/leases?all_projects=true&project_id=nlp-lab", headers=AUDITOR)) == [theirs]
    reply = client.get(f"/v1/leases?all_projects=true&project_id=nlp-lab&marker={ours.get_json()['lease']['id']}",
                       headers=AUDITOR)
    assert reply.status_code == 400 and reply.get_json()["errors"][0]["code"] == "gpu_tenancy.invalid_marker"

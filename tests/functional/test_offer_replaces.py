"""An offer taken that replaces a waiting lease cancels that lease: as a cancel is, by the
lease:delete rule and with a lease.delete audit record (it was neither asked nor recorded)."""
from __future__ import annotations

import pytest

from gpu_tenancy.config import Config
from tests.conftest import headers
from tests.functional.test_offers import ASK, cloud, full  # noqa: F401  (the offers' cloud and its full hosts)

ADMIN = headers("ops", "admin", "ops")


@pytest.fixture
def narrowed(request) -> bool:
    return getattr(request, "param", False)


@pytest.fixture
def config(db_url, tmp_path, narrowed):
    policy = tmp_path / "policy.yaml"
    policy.write_text('"lease:delete": "role:admin"\n' if narrowed else "{}\n")   # an operator's: members may not cancel
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       gpu_memory_gb={"A100": 80, "H100": 80}, policy_file=str(policy))


def waiting_with_offers(client) -> tuple[dict, list]:
    reply = client.post("/v1/leases", json=ASK, headers=headers()).get_json()
    assert reply["lease"]["status"] == "queued" and reply["offers"], reply
    return reply["lease"], reply["offers"]


def records(client, lease_id: str) -> list[str]:
    return [r["action"] for r in client.get("/v1/audit", query_string={"target_id": lease_id},
                                             headers=ADMIN).get_json()["audit_records"]]


def test_the_replaced_lease_is_cancelled_with_its_audit_record(client, full):
    waiting, offers = waiting_with_offers(client)
    taken = client.post("/v1/leases", json={**ASK, "accept_offer": offers[0]["id"]}, headers=headers())
    assert taken.status_code == 201, taken.get_json()
    assert client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]["status"] == "cancelled"
    assert sorted(records(client, waiting["id"])) == ["lease.create", "lease.delete"]


@pytest.mark.parametrize("narrowed", [True], indirect=True)
def test_an_offer_cannot_cancel_what_the_policy_does_not_let_the_caller_cancel(client, full):
    waiting, offers = waiting_with_offers(client)
    assert client.delete(f"/v1/leases/{waiting['id']}", headers=headers()).status_code == 403
    taken = client.post("/v1/leases", json={**ASK, "accept_offer": offers[0]["id"]}, headers=headers())
    assert taken.status_code == 403, taken.get_json()
    assert client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]["status"] == "queued"
    assert len(client.get("/v1/leases", headers=headers()).get_json()["leases"]) == 1   # nothing made
    assert records(client, waiting["id"]) == ["lease.create"]

"""The audit record: each change made through the API leaves exactly one record
(who, when, from where, what, before and after) in the change's own transaction;
GET /v1/audit lists them for admins, filtered, paged, as JSON or CSV."""
from __future__ import annotations

import csv
import io
import json

import pytest
from jsonschema import Draft202012Validator
from sqlalchemy.orm import Session

from gpu_tenancy.api.audit import FIELDS
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import T0, headers

HOUR = 3600
ADMIN = headers("ml-vision", "admin", user="ops")
MEMBER = headers("ml-vision", "member", user="alice")
NEW_SHAPE = {"name": "a100.x3", "gpu_model": "A100", "gpus": 3, "vcpus": 36, "ram_mb": 368640,
             "disk_gb": 150, "pci_alias": "a100"}
NEW_IMAGE = {"name": "debian-12", "cloud_ref": "7d3c0c8e-0000-4000-8000-000000000001"}
QUOTA = {"quota": {"gpu_models": {"A100": {"gpus": 4, "max_duration": "P1D"}}}}


def ok(response, status=200):
    assert response.status_code == status, response.get_json()
    return response.get_json()


def records(client, query: str = "") -> list[dict]:
    return ok(client.get(f"/v1/audit{query}", headers=ADMIN))["audit_records"]


def only_record(client) -> dict:
    found = records(client)
    assert len(found) == 1, found
    return found[0]


def lease(client, **body) -> dict:
    body = {"shape": "a100.x2", "duration": "PT1H", **body}
    return ok(client.post("/v1/leases", json=body, headers=MEMBER), 201)["lease"]


# --- each change, one record ---------------------------------------------------------------

def test_a_quota_update_records_who_where_and_the_limits_before_and_after(client):
    before = ok(client.get("/v1/quotas/ml-vision", headers=ADMIN))["quota"]
    response = client.put("/v1/quotas/ml-vision", json=QUOTA, headers=ADMIN)
    after = ok(response)["quota"]
    record = only_record(client)
    assert record == {
        "id": record["id"], "at": rfc3339(T0), "user_id": "ops", "user_project_id": "ml-vision",
        "request_id": response.headers["X-OpenStack-Request-Id"], "remote_address": "127.0.0.1",
        "action": "quota.update", "target_type": "quota", "target_id": "ml-vision",
        "target_project_id": "ml-vision", "before": before, "after": after, "outcome": "success"}
    assert before["gpu_models"]["A100"]["gpus"] == 16 and after["gpu_models"]["A100"] == {
        "gpus": 4, "borrow_gpus": 0, "max_duration": 86400, "weight": 1.0}


@pytest.mark.parametrize("forwarded, expected", [
    ("198.51.100.1, 203.0.113.7", "203.0.113.7"),   # the hop the trusted proxy added, not the caller's
    ("2001:db8::1", "2001:db8::1"),
    ("=HYPERLINK(\"x\")", "127.0.0.1"),   # not an address: the peer's is recorded
])
def test_the_address_is_the_trusted_proxys_hop_if_it_is_one(config, request, forwarded, expected):
    config.trusted_proxies = 1
    client = request.getfixturevalue("client")
    ok(client.put("/v1/quotas/ml-vision", json=QUOTA, headers={**ADMIN, "X-Forwarded-For": forwarded}))
    assert only_record(client)["remote_address"] == expected


@pytest.mark.parametrize("kind, body", [("shape", NEW_SHAPE), ("image", NEW_IMAGE)])
def test_adding_and_retiring_a_catalog_entry_are_recorded(client, clock, kind, body):
    added = ok(client.post(f"/v1/{kind}s", json=body, headers=ADMIN), 201)[kind]
    clock.advance(60)
    retired = ok(client.delete(f"/v1/{kind}s/{body['name']}", headers=ADMIN))[kind]
    create, retire = records(client)
    assert (create["action"], create["target_type"], create["target_id"]) == (f"{kind}.create", kind, body["name"])
    assert create["before"] is None and create["after"] == added and create["target_project_id"] is None
    assert (retire["action"], retire["at"]) == (f"{kind}.retire", rfc3339(T0 + 60))
    assert retire["before"] == {**added, "retired_at": None} and retire["after"] == retired
    assert retired["retired_at"] == rfc3339(T0 + 60)


def test_lease_create_update_and_delete_are_recorded_with_the_lease_before_and_after(client):
    created = lease(client)
    updated = ok(client.patch(f"/v1/leases/{created['id']}", json={"duration": "PT2H"}, headers=MEMBER))["lease"]
    assert client.delete(f"/v1/leases/{created['id']}", headers=ADMIN).status_code == 204
    cancelled = ok(client.get(f"/v1/leases/{created['id']}", headers=MEMBER))["lease"]
    create, update, delete = records(client)
    for record, user in ((create, "alice"), (update, "alice"), (delete, "ops")):
        assert (record["target_type"], record["target_id"], record["target_project_id"], record["user_id"]) == (
            "lease", created["id"], "ml-vision", user)
    assert create["action"] == "lease.create" and (create["before"], create["after"]) == (None, created)
    assert update["action"] == "lease.update" and (update["before"], update["after"]) == (created, updated)
    assert (update["before"]["duration"], update["after"]["duration"]) == (HOUR, 2 * HOUR)
    assert delete["action"] == "lease.delete" and delete["before"] == updated
    assert delete["after"]["status"] == "cancelled" == cancelled["status"]
    assert delete["after"]["allocations"] == cancelled["allocations"] == []


def test_reading_previewing_and_the_engine_record_nothing(client, engine_tick):
    lease(client)
    ok(client.post("/v1/leases?dry_run=true", json={"shape": "a100.x1", "duration": "PT1H"}, headers=MEMBER))
    for path in ("/v1/leases", "/v1/shapes", "/v1/quotas/ml-vision", "/v1/capacity", "/v1/usage", "/v1/audit"):
        ok(client.get(path, headers=ADMIN))
    engine_tick()
    engine_tick(30)   # the engine boots the lease: its events, not the audit record
    assert [r["action"] for r in records(client)] == ["lease.create"]


# --- no change, no record --------------------------------------------------------------------

def test_refused_requests_record_nothing(client):
    created = lease(client)
    client.delete(f"/v1/leases/{created['id']}", headers=MEMBER)
    baseline = len(records(client))
    refused = [
        client.put("/v1/quotas/ml-vision", json=QUOTA, headers=MEMBER),                          # 403
        client.post("/v1/shapes", json={**NEW_SHAPE, "gpus": 0}, headers=ADMIN),                  # 400
        client.post("/v1/shapes", json={**NEW_SHAPE, "name": "a100.x4"}, headers=ADMIN),           # 409
        client.delete("/v1/images/nope", headers=ADMIN),                                           # 404
        client.delete(f"/v1/leases/{created['id']}", headers=MEMBER),                              # 409
        client.patch(f"/v1/leases/{created['id']}", json={"duration": "PT2H"}, headers=MEMBER),    # 409
        client.post("/v1/leases", json={"shape": "a100.x2", "duration": "P30D"}, headers=MEMBER),  # 400
    ]
    assert [r.status_code for r in refused] == [403, 400, 409, 404, 409, 409, 400]
    assert len(records(client)) == baseline


def test_an_extension_refused_after_the_ledger_is_consulted_records_nothing(client):
    long = lease(client, shape="a100.x8", instances=3, duration="PT6H")
    waiting = lease(client, shape="a100.x8", instances=2, duration="PT1H")
    assert waiting["status"] == "queued"
    baseline = len(records(client))
    refused = client.patch(f"/v1/leases/{long['id']}", json={"duration": "PT12H"}, headers=MEMBER)
    assert refused.status_code == 409, refused.get_json()
    assert len(records(client)) == baseline


def test_a_change_that_rolls_back_leaves_no_record(client, monkeypatch):
    """The record is in the change's transaction: when that transaction fails to
    commit, neither the change nor its record remains."""
    pending = []
    real_commit = Session.commit

    def failing_commit(session):
        pending.extend(type(o).__name__ for o in session.new)
        monkeypatch.setattr(Session, "commit", real_commit)
        raise RuntimeError("the database went away")

    monkeypatch.setattr(Session, "commit", failing_commit)
    assert client.put("/v1/quotas/ml-vision", json=QUOTA, headers=ADMIN).status_code == 500
    assert "AuditRecord" in pending
    assert records(client) == []
    quota = ok(client.get("/v1/quotas/ml-vision", headers=ADMIN))["quota"]
    assert quota["gpu_models"]["A100"]["gpus"] == 16


# --- listing --------------------------------------------------------------------------------

@pytest.fixture
def history(client, clock):
    """Five changes an hour apart: quota, shape, image, and a lease of each project."""
    ok(client.put("/v1/quotas/nlp-lab", json=QUOTA, headers=ADMIN))
    clock.advance(HOUR)
    ok(client.post("/v1/shapes", json=NEW_SHAPE, headers=ADMIN), 201)
    clock.advance(HOUR)
    ok(client.post("/v1/images", json=NEW_IMAGE, headers=ADMIN), 201)
    clock.advance(HOUR)
    mine = lease(client)
    clock.advance(HOUR)
    theirs = ok(client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                            headers=headers("nlp-lab", user="bob")), 201)["lease"]
    return mine, theirs


def actions(client, query: str) -> list[str]:
    return [r["action"] for r in records(client, query)]


def test_filters(client, history):
    mine, theirs = history
    assert actions(client, "") == ["quota.update", "shape.create", "image.create", "lease.create", "lease.create"]
    assert actions(client, "?action=shape.create&action=image.create") == ["shape.create", "image.create"]
    assert [r["target_id"] for r in records(client, "?user_id=bob")] == [theirs["id"]]
    assert actions(client, "?project_id=nlp-lab") == ["quota.update", "lease.create"]
    assert [r["target_id"] for r in records(client, f"?target_id={mine['id']}")] == [mine["id"]]
    window = f"?since={rfc3339(T0 + HOUR)}&until={rfc3339(T0 + 3 * HOUR)}"
    assert actions(client, window) == ["shape.create", "image.create"]
    assert actions(client, f"?since={rfc3339(T0 + 4 * HOUR)}&action=lease.create") == ["lease.create"]


@pytest.mark.parametrize("query", ["?action=lease.explode", "?since=yesterday", "?until=2026-12-01T08:00:00",
                                   "?format=xml", "?limit=0", "?marker=999", "?marker=abc",
                                   "?target_id=a%2Fb"])
def test_bad_queries_are_refused(client, history, query):
    response = client.get(f"/v1/audit{query}", headers=ADMIN)
    assert response.status_code == 400, response.get_json()


def test_pages_follow_the_next_links_and_keep_the_filters(client, history):
    url, pages = "/v1/audit?limit=2&action=lease.create&action=shape.create&action=image.create", []
    while url:
        body = ok(client.get(url, headers=ADMIN))
        pages.append([r["action"] for r in body["audit_records"]])
        url = body["audit_records_links"][0]["href"] if "audit_records_links" in body else None
    assert pages == [["shape.create", "image.create"], ["lease.create", "lease.create"]]


def test_a_reader_whose_marker_was_purged_goes_on_from_where_it_was(client, history, clock, sessions):
    """An export that pages the record (a SIEM's collector) keeps its last id as the marker.
    Once `gpu-tenancy db purge` deleted that record, the marker was refused as "not an audit
    record id" and the reader could never go on."""
    from gpu_tenancy.db import purge
    first = ok(client.get("/v1/audit?limit=2", headers=ADMIN))
    later = first["audit_records_links"][0]["href"]
    clock.advance(30 * 86400)
    ok(client.put("/v1/quotas/ml-vision", json=QUOTA, headers=ADMIN))   # written after the collector read
    assert purge.purge(sessions, clock.now() - 86400)["audit records"] == 5
    assert [r["action"] for r in ok(client.get(later, headers=ADMIN))["audit_records"]] == ["quota.update"]
    assert client.get("/v1/audit?marker=999", headers=ADMIN).status_code == 400   # never given: still refused


def test_the_next_link_takes_no_query_key_as_its_own(client, history):
    """The link once came from url_for(**query): ?endpoint= was a 500, ?_external=0 a relative link."""
    body = ok(client.get("/v1/audit?limit=1&action=shape.create&action=image.create&endpoint=x&_external=0",
                         headers=ADMIN))
    href = body["audit_records_links"][0]["href"]
    assert href.startswith("http://localhost/v1/audit?") and "endpoint=x" in href and "_external=0" in href
    second = ok(client.get(href, headers=ADMIN))
    assert [r["action"] for r in body["audit_records"] + second["audit_records"]] == ["shape.create", "image.create"]


def test_csv_has_a_header_row_and_the_same_records_as_json(client, history):
    as_json = records(client, "?limit=3&project_id=ml-vision")
    response = client.get("/v1/audit?limit=3&project_id=ml-vision&format=csv", headers=ADMIN)
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert tuple(rows[0]) == FIELDS and len(rows) == len(as_json) == 1
    for row, record in zip(rows, as_json):
        assert {k: json.loads(v) if k in ("before", "after") else v for k, v in row.items()} == {
            k: v if k in ("before", "after") else "" if v is None else str(v) for k, v in record.items()}
    paged = client.get("/v1/audit?limit=2&format=csv", headers=ADMIN)
    assert len(list(csv.reader(io.StringIO(paged.get_data(as_text=True))))) == 3
    assert 'rel="next"' in paged.headers["Link"] and "format=csv" in paged.headers["Link"]


def test_the_listing_matches_its_openapi_schema(client, history):
    document = ok(client.get("/v1/openapi.json"))
    Draft202012Validator({**document, "$ref": "#/paths/~1v1~1audit/get/responses/200/content/application~1json/schema"}
                         ).validate(ok(client.get("/v1/audit?limit=2", headers=ADMIN)))


@pytest.mark.parametrize("who, status", [(headers("ml-vision", "member"), 403), (headers("ml-vision", "reader"), 403),
                                         (headers("nlp-lab", "member"), 403), ({}, 401)])
def test_only_admins_read_the_audit_record(client, history, who, status):
    for query in ("", "?format=csv"):
        response = client.get(f"/v1/audit{query}", headers=who)
        assert response.status_code == status
        assert response.get_json()["errors"][0]["status"] == status

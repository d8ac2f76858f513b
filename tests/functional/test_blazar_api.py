"""/reservation/v1/leases, the Blazar-compatible API, in process: Blazar's bodies, dates
and error form on gpu-tenancy's leases, and what it refuses (tests/functional/
test_blazar_clients.py drives the same routes with the real python-blazarclient)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest
from sqlalchemy import event

from gpu_tenancy.api.blazar import asks, schemas
from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config
from tests.conftest import T0, headers

MEMBER = headers("ml-vision", "member", "alice")
READER = headers("ml-vision", "reader", "rita")
OTHER = headers("nlp-lab", "member", "nina")
ADMIN = headers("ml-vision", "admin", "root")
URL = "/reservation/v1/leases"
SHOWN = "%Y-%m-%dT%H:%M:%S.%f"


def at(hours: float) -> str:
    """T0 + hours in Blazar's request form."""
    return datetime.fromtimestamp(T0 + int(hours * 3600), timezone.utc).strftime("%Y-%m-%d %H:%M")


def shown(hours: float) -> str:
    return datetime.fromtimestamp(T0 + int(hours * 3600), timezone.utc).strftime(SHOWN)


def flavor_lease(name="b", start="now", end_hours=24.0, shape="a100.x2", amount=1, **extra) -> dict:
    return {"name": name, "start_date": start, "end_date": at(end_hours), "events": [], "before_end_date": None,
            "reservations": [{"resource_type": "flavor:instance", "flavor_id": shape, "amount": amount,
                              "affinity": "None"}], **extra}


def error(response, status: int) -> str:
    body = response.get_json()
    assert response.status_code == status, body
    assert body == {"error_code": status, "error_message": body["error_message"], "error_name": status}
    return body["error_message"]


def test_a_flavor_lease_is_made_shown_listed_and_its_reservation_names_the_flavor_once_it_starts(
        client, engine_tick):
    made = client.post(URL, json=flavor_lease(amount=2), headers=MEMBER)
    assert made.status_code == 201, made.get_json()
    lease = made.get_json()["lease"]
    assert (lease["name"], lease["status"], lease["project_id"], lease["user_id"]) == \
        ("b", "PENDING", "ml-vision", "alice")
    assert (lease["start_date"], lease["end_date"]) == (shown(0), shown(24))
    [reservation] = lease["reservations"]
    assert reservation["resource_type"] == "flavor:instance" and reservation["amount"] == 2
    assert (reservation["vcpus"], reservation["memory_mb"], reservation["disk_gb"]) == (24, 240 * 1024, 100)
    assert reservation["flavor_id"] is None        # the lease's flavor is made at its start
    assert [e["event_type"] for e in lease["events"]] == ["start_lease", "end_lease"]
    native = client.get(f"/v1/leases/{lease['id']}", headers=MEMBER).get_json()["lease"]
    assert native["boot"] == "tenant" and native["instances"] == 2 and native["shape"] == "a100.x2"

    engine_tick()
    engine_tick(5)
    now = client.get(f"{URL}/{lease['id']}", headers=MEMBER).get_json()["lease"]
    native = client.get(f"/v1/leases/{lease['id']}", headers=MEMBER).get_json()["lease"]
    assert now["status"] == "ACTIVE" and native["status"] == "active"
    assert now["reservations"][0]["flavor_id"] == native["flavor"]["id"] is not None
    assert now["reservations"][0]["id"] == reservation["id"]       # the same in every answer
    assert [e["status"] for e in now["events"]] == ["DONE", "UNDONE"]
    assert [row["id"] for row in client.get(URL, headers=READER).get_json()["leases"]] == [lease["id"]]
    assert client.get(URL, headers=OTHER).get_json()["leases"] == []
    assert "not found" in error(client.get(f"{URL}/{lease['id']}", headers=OTHER), 404)


def test_update_extends_and_shortens_the_end_and_refuses_what_it_cannot_change(client):
    lease = client.post(URL, json=flavor_lease(), headers=MEMBER).get_json()["lease"]
    longer = client.put(f"{URL}/{lease['id']}", json={"end_date": at(30)}, headers=MEMBER)
    assert longer.status_code == 200 and longer.get_json()["lease"]["end_date"] == shown(30)
    shorter = client.put(f"{URL}/{lease['id']}", json={"end_date": at(12)}, headers=MEMBER)
    assert shorter.get_json()["lease"]["end_date"] == shown(12)
    assert client.get(f"/v1/leases/{lease['id']}", headers=MEMBER).get_json()["lease"]["duration"] == 12 * 3600
    renamed = client.put(f"{URL}/{lease['id']}", json={"name": "b-renamed"}, headers=MEMBER)
    assert renamed.status_code == 200 and renamed.get_json()["lease"]["name"] == "b-renamed"
    client.post(URL, json=flavor_lease("taken", at(48), 50), headers=MEMBER)
    assert "already has a lease named 'taken'" in error(client.put(f"{URL}/{lease['id']}", json={
        "name": "taken", "end_date": at(20)}, headers=MEMBER), 409)
    assert client.get(f"{URL}/{lease['id']}", headers=MEMBER).get_json()["lease"]["end_date"] == shown(12)
    assert "start_date cannot be updated" in error(
        client.put(f"{URL}/{lease['id']}", json={"start_date": at(2)}, headers=MEMBER), 409)
    assert "not yet supported" in error(client.put(f"{URL}/{lease['id']}", json={"reservations": [
        {"id": lease["reservations"][0]["id"], "amount": 3}]}, headers=MEMBER), 409)
    assert "Invalid reservation IDs are: nope" in error(client.put(f"{URL}/{lease['id']}", json={
        "reservations": [{"id": "nope"}]}, headers=MEMBER), 400)
    assert "later than current and start date" in error(
        client.put(f"{URL}/{lease['id']}", json={"end_date": at(-1)}, headers=MEMBER), 400)
    assert error(client.put(f"{URL}/{lease['id']}", json={"end_date": at(40)}, headers=READER), 403)
    assert client.get(f"/v1/leases/{lease['id']}", headers=MEMBER).get_json()["lease"]["duration"] == 12 * 3600


def test_delete_ends_the_lease_and_a_deleted_waiting_lease_is_gone(client):
    later = client.post(URL, json=flavor_lease("later", at(48), 60), headers=MEMBER).get_json()["lease"]
    assert later["status"] == "PENDING" and later["start_date"] == shown(48)
    assert client.delete(f"{URL}/{later['id']}", headers=READER).status_code == 403
    assert client.delete(f"{URL}/{later['id']}", headers=MEMBER).status_code == 204
    assert "not found" in error(client.get(f"{URL}/{later['id']}", headers=MEMBER), 404)
    assert client.get(URL, headers=MEMBER).get_json()["leases"] == []
    assert client.get(f"/v1/leases/{later['id']}", headers=MEMBER).get_json()["lease"]["status"] == "cancelled"


@pytest.mark.parametrize("body, status, words", [
    ({"name": "x", "start_date": "2050-11-13 13:13", "end_date": "2050-11-13 12:13"}, 400,
     "End date must be later than start date."),
    ({"name": "x", "start_date": "Bogus-date 13:13", "end_date": "2050-11-13 12:13"}, 400,
     "Bogus-date 13:13 is an invalid date. Required format: %Y-%m-%d %H:%M"),
    ({"name": "x", "start_date": "now"}, 400, "Missing parameter end_date"),
    ({"start_date": "now", "end_date": at(2)}, 400, "Missing parameter name"),
    ({"name": "x", "start_date": at(-2), "end_date": at(2)}, 400, "Start date must be later than current date"),
    ({"name": "x", "start_date": "2026-12-01T09:00:00Z", "end_date": at(2)}, 400, "is an invalid date"),
    ({"name": "x", "start_date": "now", "end_date": at(2)}, 400, "give one reservation of resource_type"),
    (flavor_lease(reservations=[{"resource_type": "physical:host", "min": 1, "max": 1,
                                 "hypervisor_properties": "[]", "resource_properties": "[]"}]), 400,
     "physical:host reservations are not offered here"),
    (flavor_lease(reservations=[{"resource_type": "virtual:floatingip", "amount": 1, "network_id": "n"}]), 400,
     "virtual:floatingip reservations are not offered"),
    (flavor_lease(reservations=[{"resource_type": "storage:disk"}]), 400,
     "The storage:disk resource type is not supported"),
    (flavor_lease(reservations=[{"flavor_id": "a100.x1", "amount": 1}]), 400, "Missing parameter resource_type"),
    (flavor_lease(reservations=[{"resource_type": "flavor:instance", "amount": 1}]), 400,
     "Missing parameter flavor_id"),
    (flavor_lease(amount=0), 400, "Malformed parameter amount"),
    (flavor_lease(amount="two"), 400, "Malformed parameter amount"),
    (flavor_lease(shape="nope"), 400, "unknown shape 'nope'"),
    (flavor_lease(reservations=[{"resource_type": "flavor:instance", "flavor_id": "a100.x1", "amount": 1,
                                 "affinity": True}]), 400, "affinity is not supported"),
    (flavor_lease(reservations=[{"resource_type": "flavor:instance", "flavor_id": "a100.x1", "amount": 1}] * 2),
     400, "one instance reservation"),
    (flavor_lease(events=[{"event_type": "notification", "event_date": at(2)}]), 400, "events of the client's own"),
    (flavor_lease(before_end_date=at(20)), 400, "before_end_date is not supported"),
    (flavor_lease(extra_key=1), 400, "unknown lease parameters: extra_key"),
    (flavor_lease(name="x" * 81), 400, "Malformed parameter name"),
    ([1, 2], 400, "Malformed parameter body"),
    # values of a type or a kind of text the checks once met with a 500
    (flavor_lease(reservations=[{"resource_type": [], "flavor_id": "a100.x1", "amount": 1}]), 400,
     "The [] resource type is not supported"),
    (flavor_lease(reservations=[{"resource_type": {"a": 1}, "flavor_id": "a100.x1", "amount": 1}]), 400,
     "resource type is not supported"),
    (flavor_lease(amount="\u00b2"), 400, "Malformed parameter amount"),      # '²'.isdigit(), int() refuses it
    (flavor_lease(amount="\u2466"), 400, "Malformed parameter amount"),      # '⑦'
    (flavor_lease(amount="1" * 5000), 400, "Malformed parameter amount"),    # past int()'s digits
    (flavor_lease(reservations=[{"resource_type": "virtual:instance", "vcpus": "\u00b2", "memory_mb": 1024,
                                 "disk_gb": 100, "amount": 1}]), 400, "Malformed parameter vcpus"),
    (flavor_lease(shape="\ud83d"), 400, "lone UTF-16 surrogate"),
    (flavor_lease(shape="a100.x1\u0000"), 400, "NUL character"),
    (flavor_lease(name="b\u0000"), 400, "NUL character"),
])
def test_bad_asks_are_refused_in_blazar_words_and_make_nothing(client, body, status, words):
    assert words in error(client.post(URL, json=body, headers=MEMBER), status)
    assert client.get("/v1/leases?all_projects=1", headers=ADMIN).get_json()["leases"] == []


def test_a_virtual_instance_reservation_becomes_the_shape_with_its_sizes(client):
    def ask(**reservation):
        body = flavor_lease(reservations=[{"resource_type": "virtual:instance", "amount": 1, "affinity": "None",
                                           "vcpus": 48, "memory_mb": 480 * 1024, "disk_gb": 200,
                                           "resource_properties": "", **reservation}])
        return client.post(URL, json=body, headers=MEMBER)
    assert "several shapes have vcpus=48" in error(ask(), 400)    # a100.x4 and h100.x2
    made = ask(resource_properties='["==", "$gpu_model", "H100"]')
    assert made.status_code == 201, made.get_json()
    assert client.get(f"/v1/leases/{made.get_json()['lease']['id']}",
                      headers=MEMBER).get_json()["lease"]["shape"] == "h100.x2"
    assert "no shape on offer has vcpus=47" in error(ask(vcpus=47), 400)
    assert "Malformed parameter resource_properties" in error(ask(resource_properties='["<", "$gpus", 2]'), 400)


def test_bodies_nested_deeper_than_the_parser_goes_are_a_400_and_change_nothing(client):
    """The native API's parse_json reads the bodies here too: nesting that made the parser
    recurse past Python's limit was a 500, as was resource_properties nested as deep."""
    deep = "[" * 50_000 + "]" * 50_000
    assert "32 levels" in error(client.post(URL, data=deep, content_type="application/json", headers=MEMBER), 400)
    assert "NaN" in error(client.post(URL, data='{"name": NaN}', content_type="application/json", headers=MEMBER),
                          400)
    lease = client.post(URL, json=flavor_lease(), headers=MEMBER).get_json()["lease"]
    assert "32 levels" in error(client.put(f"{URL}/{lease['id']}", data='{"name": ' + deep + "}",
                                           content_type="application/json", headers=MEMBER), 400)
    virtual = flavor_lease(reservations=[{"resource_type": "virtual:instance", "vcpus": 24, "memory_mb": 240 * 1024,
                                          "disk_gb": 100, "amount": 1,
                                          "resource_properties": "[" * 100_000 + "]" * 100_000}])
    assert "Malformed parameter resource_properties" in error(client.post(URL, json=virtual, headers=MEMBER), 400)
    assert client.get(URL, headers=MEMBER).get_json()["leases"] == [lease]


def test_the_listing_reads_only_what_it_shows(client, runtime, engine_tick):
    """Blazar's listing has no pages: it once loaded every lease's whole row, user_data (up
    to 64 KB) and all. A listed lease is still what its own page shows."""
    for i in range(3):
        assert client.post(URL, json=flavor_lease(name=f"b{i}"), headers=MEMBER).status_code == 201
    made = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT4H", "user_data": "#!/bin/sh\n"},
                       headers=MEMBER)
    assert made.status_code == 201, made.get_json()
    engine_tick()
    engine_tick(5)
    sent: list[str] = []

    def record(conn, cursor, statement, *args):
        sent.append(statement)
    engine = runtime.sessions.kw["bind"]
    event.listen(engine, "before_cursor_execute", record)
    try:
        listed = client.get(URL, headers=MEMBER).get_json()["leases"]
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert sorted(lease["name"] for lease in listed) == sorted(["b0", "b1", "b2", made.get_json()["lease"]["name"]])
    assert any(lease["status"] == "ACTIVE" and lease["reservations"][0]["flavor_id"] for lease in listed)
    reads = [s for s in sent if "FROM leases" in s]
    assert reads and not any("user_data" in s or "planned_hosts" in s for s in reads), reads
    for lease in listed:
        assert lease == client.get(f"{URL}/{lease['id']}", headers=MEMBER).get_json()["lease"]


def test_unauthenticated_and_unauthorized_answers_are_in_blazar_form(client):
    assert "X-Auth-Token" in error(client.get(URL), 401)
    assert error(client.post(URL, json=flavor_lease(), headers=READER), 403)
    assert "not found" in error(client.get(f"{URL}/{'x' * 80}", headers=MEMBER), 404)
    assert "printable" in error(client.get(f"{URL}/a%00", headers=MEMBER), 400)   # app.py's check, Blazar's form
    assert error(client.patch(f"{URL}/abc", json={}, headers=MEMBER), 405)


def test_a_noauth2_token_stands_for_the_identity_headers(client):
    """python-blazarclient sends only X-Auth-Token (auth type admin_token) to the demo."""
    made = client.post(URL, json=flavor_lease(), headers={"X-Auth-Token": "ml-vision:alice"})
    assert made.status_code == 201 and made.get_json()["lease"]["user_id"] == "alice"
    assert client.get(URL, headers={"X-Auth-Token": "nlp-lab:nina"}).get_json()["leases"] == []
    assert client.get(URL, headers={"X-Auth-Token": "ml-vision:root:admin"}).status_code == 200
    assert client.get(URL, headers={"X-Auth-Token": "no-colon"}).status_code == 401


def fill_h100(client) -> str:
    """ml-vision's whole H100 quota (4) for the next 24 hours."""
    full = client.post(URL, json=flavor_lease("full", shape="h100.x4"), headers=MEMBER)
    assert full.status_code == 201, full.get_json()
    return full.get_json()["lease"]["id"]


def test_refuse_mode_a_lease_that_would_queue_is_refused_like_blazar_and_nothing_is_made(client):
    fill_h100(client)
    refused = client.post(URL, json=flavor_lease("more", shape="h100.x1"), headers=MEMBER)
    assert error(refused, 409).startswith("Not enough hosts available")
    later = client.post(URL, json=flavor_lease("after", at(25), 30, shape="h100.x1"), headers=MEMBER)
    assert later.status_code == 201 and later.get_json()["lease"]["gpu_tenancy_status"] == "scheduled"
    names = {row["name"] for row in client.get("/v1/leases", headers=MEMBER).get_json()["leases"]}
    assert names == {"full", "after"}      # "more" was never made


@pytest.fixture
def pending_client(db_url, clock, cloud, app):   # `app` seeds the catalog into db_url
    config = Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                         blazar_when_queued="pending")
    return create_app(config, clock=clock, cloud=cloud, start_engine=False).test_client()


def test_pending_mode_a_lease_that_would_queue_is_accepted_pending_with_the_start_the_queue_plans(
        pending_client):
    fill_h100(pending_client)
    queued = pending_client.post(URL, json=flavor_lease("more", shape="h100.x1", end_hours=2), headers=MEMBER)
    assert queued.status_code == 201, queued.get_json()
    lease = queued.get_json()["lease"]
    assert (lease["status"], lease["gpu_tenancy_status"]) == ("PENDING", "queued")
    start, end = (datetime.strptime(lease[k], SHOWN) for k in ("start_date", "end_date"))
    assert shown(24) <= lease["start_date"] < shown(25)       # once the full lease has ended
    assert (end - start).total_seconds() == 2 * 3600          # for as long as asked


def test_the_option_is_checked():
    with pytest.raises(ValueError, match="blazar_when_queued must be refuse or pending"):
        Config.load(database_url="sqlite://", blazar_when_queued="queue")


def test_answers_match_the_openapi_document(client, engine_tick):
    from jsonschema import Draft202012Validator
    document = client.get("/v1/openapi.json").get_json()

    def check(path: str, method: str, status: int, response) -> None:
        assert response.status_code == status, response.get_json()
        schema = document["paths"][path][method]["responses"][str(status)]["content"]["application/json"]["schema"]
        Draft202012Validator({**document, **schema}).validate(response.get_json())
    one = "/reservation/v1/leases/{lease_id}"
    made = client.post(URL, json=flavor_lease(), headers=MEMBER)
    check("/reservation/v1/leases", "post", 201, made)
    lease_id = made.get_json()["lease"]["id"]
    engine_tick()
    engine_tick(5)
    check(one, "get", 200, client.get(f"{URL}/{lease_id}", headers=MEMBER))     # active: a flavor id
    check("/reservation/v1/leases", "get", 200, client.get(URL, headers=MEMBER))
    check(one, "put", 200, client.put(f"{URL}/{lease_id}", json={"end_date": at(30)}, headers=MEMBER))
    check(one, "get", 404, client.get(f"{URL}/nope", headers=MEMBER))
    check("/reservation/v1/leases", "post", 400, client.post(URL, json={}, headers=MEMBER))


def preview_before_the_gpus_went(monkeypatch) -> None:
    """The create's preview sees the GPUs free: another request took them before its plan."""
    from gpu_tenancy.api.blazar import leases as blazar_leases
    real_dry_run = blazar_leases.dry_run

    def stale_dry_run(session, now, *args):   # the plan as it was before the GPUs were taken
        planned = real_dry_run(session, now, *args)
        return replace(planned, placement=replace(planned.placement, start=now))
    monkeypatch.setattr(blazar_leases, "dry_run", stale_dry_run)


def test_refuse_mode_a_lease_that_lost_the_gpus_after_the_preview_is_cancelled_and_refused(client, monkeypatch):
    """Another request takes the GPUs between the preview and the plan: the lease made is
    cancelled before the 409, so Blazar's listing never shows it (the native one does,
    cancelled, with its audit record)."""
    fill_h100(client)
    preview_before_the_gpus_went(monkeypatch)
    assert error(client.post(URL, json=flavor_lease("raced", shape="h100.x1"), headers=MEMBER), 409).startswith(
        "Not enough hosts available")
    assert [row["name"] for row in client.get(URL, headers=MEMBER).get_json()["leases"]] == ["full"]
    native = {row["name"]: row["status"] for row in client.get("/v1/leases", headers=MEMBER).get_json()["leases"]}
    assert native == {"full": "scheduled", "raced": "cancelled"}


def minute_of(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M")


def test_refuse_mode_a_start_date_in_the_minute_under_way_is_a_lease_that_starts_now(client, clock):
    """Blazar takes a start_date of the current minute (its check is `start < now`, to the
    minute): python-chi and scripts write "now" so. The GPUs are free: the lease is made."""
    clock.advance(30)
    made = client.post(URL, json=flavor_lease(start=minute_of(clock.now()), end_hours=5), headers=MEMBER)
    assert made.status_code == 201, made.get_json()
    assert made.get_json()["lease"]["gpu_tenancy_status"] in ("scheduled", "provisioning", "active")


def test_pending_mode_an_end_date_moved_by_an_hour_moves_a_queued_lease_end_by_an_hour(pending_client):
    """A client prolongs a PENDING lease from the end_date it was shown (blazarclient's
    --prolong-for adds to it): for a queued lease that is the queue's ETA plus its duration, so
    the new end is read from the start shown, not from the lease's asked start a day earlier."""
    fill_h100(pending_client)
    queued = pending_client.post(URL, json=flavor_lease("more", shape="h100.x1", end_hours=2),
                                 headers=MEMBER).get_json()["lease"]
    assert queued["gpu_tenancy_status"] == "queued"
    shown_end = datetime.strptime(queued["end_date"], SHOWN).replace(tzinfo=timezone.utc)
    later = minute_of(int(shown_end.timestamp()) + 3600)
    moved = pending_client.put(f"{URL}/{queued['id']}", json={"end_date": later}, headers=MEMBER)
    assert moved.status_code == 200, moved.get_json()
    assert moved.get_json()["lease"]["end_date"][:16] == later.replace(" ", "T")
    native = pending_client.get(f"/v1/leases/{queued['id']}", headers=MEMBER).get_json()["lease"]
    assert 3 * 3600 - 60 < native["duration"] <= 3 * 3600       # 2 h asked, 1 h more: not a day more
    earlier = minute_of(int(shown_end.timestamp()) - 3600)
    pending_client.put(f"{URL}/{queued['id']}", json={"end_date": earlier}, headers=MEMBER)
    native = pending_client.get(f"/v1/leases/{queued['id']}", headers=MEMBER).get_json()["lease"]
    assert native["duration"] <= 3600                          # shortened, as asked


def test_an_end_date_of_now_ends_a_running_lease_as_blazar_does(client, engine_tick, clock):
    """Blazar reads end_date "now" as the current minute and ends the lease at it."""
    lease = client.post(URL, json=flavor_lease(end_hours=5), headers=MEMBER).get_json()["lease"]
    engine_tick()
    engine_tick(5)
    clock.advance(600)
    ended = client.put(f"{URL}/{lease['id']}", json={"end_date": "now"}, headers=MEMBER)
    assert ended.status_code == 200, ended.get_json()
    assert ended.get_json()["lease"]["status"] in ("TERMINATING", "TERMINATED")
    native = client.get(f"/v1/leases/{lease['id']}", headers=MEMBER).get_json()["lease"]
    assert native["status"] in ("ending", "ended")


def test_deleting_a_terminated_lease_succeeds_as_in_blazar(client, engine_tick):
    """Blazar deletes a lease in any state; Heat's stack delete and python-chi's cleanup delete
    leases that have ended and fail on an error."""
    lease = client.post(URL, json=flavor_lease(end_hours=1), headers=MEMBER).get_json()["lease"]
    engine_tick()
    engine_tick(5)
    for _ in range(4):
        engine_tick(1800)
    assert client.get(f"{URL}/{lease['id']}", headers=MEMBER).get_json()["lease"]["status"] == "TERMINATED"
    assert client.delete(f"{URL}/{lease['id']}", headers=READER).status_code == 403
    assert client.delete(f"{URL}/{lease['id']}", headers=MEMBER).status_code == 204
    assert client.delete(f"{URL}/{lease['id']}", headers=OTHER).status_code == 404


@pytest.fixture
def members_cannot_delete(db_url, clock, cloud, app, tmp_path):   # `app` seeds the catalog into db_url
    policy = tmp_path / "policy.yaml"
    policy.write_text('"lease:delete": "role:admin"\n')   # an operator's: members may not cancel
    config = Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, policy_file=str(policy))
    return create_app(config, clock=clock, cloud=cloud, start_engine=False).test_client()


def test_refuse_mode_the_lease_undone_after_a_lost_race_is_undone_whoever_may_cancel(members_cannot_delete,
                                                                                      monkeypatch):
    """The service undoes its own create (the GPUs went between the preview and the plan): not
    the caller's cancel, so a policy that keeps cancels from members leaves no lease behind."""
    client = members_cannot_delete
    fill_h100(client)
    preview_before_the_gpus_went(monkeypatch)
    assert error(client.post(URL, json=flavor_lease("raced", shape="h100.x1"), headers=MEMBER), 409).startswith(
        "Not enough hosts available")
    assert [row["name"] for row in client.get(URL, headers=MEMBER).get_json()["leases"]] == ["full"]


def test_an_update_that_renames_and_ends_a_lease_is_refused_whole(members_cannot_delete):
    """A PUT with a new name and an end_date of now ends the lease as a DELETE does (lease:delete,
    which this policy keeps from members): the name was written in a transaction of its own
    before the end was refused, so the 403 left the lease renamed."""
    client = members_cannot_delete
    lease = client.post(URL, json=flavor_lease("kept"), headers=MEMBER).get_json()["lease"]
    error(client.put(f"{URL}/{lease['id']}", json={"name": "renamed", "end_date": "now"}, headers=MEMBER), 403)
    shown = client.get(f"{URL}/{lease['id']}", headers=MEMBER).get_json()["lease"]
    assert (shown["name"], shown["gpu_tenancy_status"]) == ("kept", "scheduled")
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=MEMBER).get_json()["events"]
    assert "renamed" not in [e["kind"] for e in events]
    admin = client.put(f"{URL}/{lease['id']}", json={"name": "renamed", "end_date": "now"}, headers=ADMIN)
    assert admin.status_code == 200, admin.get_json()
    assert (admin.get_json()["lease"]["name"], admin.get_json()["lease"]["gpu_tenancy_status"]) == (
        "renamed", "cancelled")


@pytest.mark.parametrize("method, path", [("POST", URL), ("PUT", f"{URL}/abc")])
def test_a_body_over_the_limit_is_a_413_in_blazar_form(client, method, path):
    """The app's own handler of a too large body (api/errors.py) is found before the Blazar
    blueprint's (Flask looks for the status first): it answered the Blazar routes in the native
    error form, which blazarclient does not read."""
    data = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
    reply = client.open(path, method=method, data=data, content_type="application/json", headers=MEMBER)
    assert "1024 KiB" in error(reply, 413)


@pytest.mark.parametrize("path, who, status", [("/reservation/v1/hosts", {}, 401),
                                               ("/reservation/v1/hosts?detail=%00", MEMBER, 400)])
def test_an_error_before_any_route_matched_is_in_blazar_form(client, path, who, status):
    """No Blazar route taken (Blazar's host API, say), no blueprint's handler: an error the app
    raises before routing (the 401, a NUL in the query) was in the native form."""
    assert error(client.get(path, headers=who), status)


def test_an_end_date_of_now_on_a_lease_not_started_yet_answers_the_lease_it_ended(client):
    """The end that has come cancels a lease whose start has come but which the engine has not
    started yet; the answer then looked the lease up as a GET does, which hides a cancelled
    lease: a 404 for an update that was made. A GET after it is the 404 of a deleted lease."""
    lease = client.post(URL, json=flavor_lease(), headers=MEMBER).get_json()["lease"]
    assert lease["gpu_tenancy_status"] == "scheduled"
    ended = client.put(f"{URL}/{lease['id']}", json={"end_date": "now"}, headers=MEMBER)
    assert ended.status_code == 200, ended.get_json()
    assert (ended.get_json()["lease"]["status"], ended.get_json()["lease"]["gpu_tenancy_status"]) == (
        "TERMINATED", "cancelled")
    assert client.get(f"/v1/leases/{lease['id']}", headers=MEMBER).get_json()["lease"]["status"] == "cancelled"
    error(client.get(f"{URL}/{lease['id']}", headers=MEMBER), 404)


@pytest.fixture
def members_cannot_read(db_url, clock, cloud, app, tmp_path):   # `app` seeds the catalog into db_url
    policy = tmp_path / "policy.yaml"
    policy.write_text('"lease:show": "role:admin"\n')   # an operator's: members make leases, admins read them
    config = Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, policy_file=str(policy))
    return create_app(config, clock=clock, cloud=cloud, start_engine=False).test_client()


def test_refuse_mode_the_lease_undone_after_a_lost_race_is_undone_whoever_may_read_it(members_cannot_read,
                                                                                       monkeypatch):
    """The undo looked the lease up as its caller may see it: under a policy that lets members make
    leases but not read them, it was "not found", answered 404, and the lease was left queued."""
    client = members_cannot_read
    fill_h100(client)
    preview_before_the_gpus_went(monkeypatch)
    assert error(client.post(URL, json=flavor_lease("raced", shape="h100.x1"), headers=MEMBER), 409).startswith(
        "Not enough hosts available")
    native = {row["name"]: row["status"] for row in client.get("/v1/leases", headers=ADMIN).get_json()["leases"]}
    assert native == {"full": "scheduled", "raced": "cancelled"}


@pytest.mark.parametrize("method, body, words", [
    ("post", flavor_lease(extra_key=1), "unknown lease parameters: extra_key"),
    ("post", flavor_lease(reservations=[{"resource_type": "flavor:instance", "flavor_id": "a100.x1", "amount": 1,
                                         "hypervisor_properties": ""}]), "unknown flavor:instance parameters"),
    ("put", {"end_date": at(30), "extra_key": 1}, "unknown lease parameters: extra_key"),
])
def test_a_key_the_api_refuses_is_one_its_document_does_not_take(client, method, body, words):
    """A body the document allows is not refused for a key it has: the document's bodies were
    open (any other key allowed) while the API refuses every key it does not know."""
    from jsonschema import Draft202012Validator
    document = client.get("/v1/openapi.json").get_json()
    path = URL if method == "post" else f"{URL}/{{lease_id}}"
    lease_id = client.post(URL, json=flavor_lease(name="other"), headers=MEMBER).get_json()["lease"]["id"]
    assert words in error(client.open(path.format(lease_id=lease_id), method=method.upper(), json=body,
                                      headers=MEMBER), 400)
    schema = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    assert not Draft202012Validator({**document, **schema}).is_valid(body)


def test_the_documented_bodies_name_every_key_the_api_takes():
    """Closed bodies (above) with every key asks.py reads: none of them refused by the document."""
    assert set(schemas.CREATE["properties"]) == asks.CREATE_KEYS
    assert set(schemas.UPDATE["properties"]) == asks.UPDATE_KEYS
    assert set(schemas.RESERVATION_ASK["properties"]) == set().union(*asks.RESERVATION_KEYS.values())

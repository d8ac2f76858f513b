"""Counter-offers through the API (issue 20): the A100 model full, an H100 host free and a
6-hour A100 gap; a 2 x A100 lease of 12 h is offered exactly "H100 now", "A100 for 6 h now"
and "A100 at the end of the first lease", and taking one gives that start. An offer is
signed (changed: 400), short-lived (409), re-checked under the ledger lock (409, nothing
made), and one made for a waiting lease replaces it."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gpu_tenancy.app import create_app
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db import models as m
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import T0, headers
from tests.functional.test_errors import api_error
from tests.functional.test_metrics import scrape, value

H = 3600
ASK = {"shape": "a100.x2", "duration": "12h"}


@pytest.fixture
def cloud(clock):
    demo = yaml.safe_load(Path(DEMO_CLOUD).read_text())
    demo["delete_seconds"] = 0   # no release allowance: the gap is 6 hours exactly
    demo["hosts"] = [{"prefix": "gpu-a100-", "count": 2, "gpu_model": "A100", "gpus": 2},
                     {"prefix": "gpu-h100-", "count": 1, "gpu_model": "H100", "gpus": 2}]
    return SimulatedCloud(demo, clock)


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       gpu_memory_gb={"A100": 80, "H100": 80})


@pytest.fixture
def full(client, engine_tick):
    """The first lease on one A100 host until +10 h; a reservation on the other from +6 h."""
    other = headers("nlp-lab")
    first = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "10h"}, headers=other)
    later = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "24h",
                                            "start": rfc3339(T0 + 6 * H)}, headers=other)
    assert first.status_code == later.status_code == 201
    assert later.get_json()["lease"]["status"] == "scheduled"
    engine_tick()
    return first.get_json()["lease"]


def preview(client, body=ASK, project="ml-vision"):
    reply = client.post("/v1/leases?dry_run=true", json=body, headers=headers(project))
    assert reply.status_code == 200, reply.get_json()
    return reply.get_json()


def lease_count(sessions) -> int:
    with sessions() as session:
        return session.query(m.Lease).count()


def test_the_offers_are_h100_now_a100_for_6_hours_now_and_a100_at_the_end_of_the_first_lease(client, full):
    shown = preview(client)
    assert shown["lease"]["queue"]["eta"] == full["end"] == rfc3339(T0 + 10 * H)
    offers = shown["offers"]
    assert [(o["kind"], o["shape"], o["duration"], o["start"], o["reserved"], o["borrowing"]) for o in offers] == [
        ("gpu_model", "h100.x2", 12 * H, rfc3339(T0), False, False),
        ("shorter", "a100.x2", 6 * H, rfc3339(T0), False, False),
        ("later", "a100.x2", 12 * H, full["end"], True, False)]
    assert offers[0]["summary"] == "H100 instead of A100 (1 x 2 H100), now"
    assert all(o["expires_at"] == rfc3339(T0 + 300) for o in offers)


@pytest.mark.parametrize("index, start, status", [(0, T0, "scheduled"), (1, T0, "scheduled"),
                                                  (2, T0 + 10 * H, "scheduled")])
def test_taking_an_offer_gives_its_start(client, full, index, start, status):
    offer = preview(client)["offers"][index]
    reply = client.post("/v1/leases", json={**ASK, "name": "taken", "accept_offer": offer["id"]},
                        headers=headers())
    assert reply.status_code == 201, reply.get_json()
    lease = reply.get_json()["lease"]
    assert (lease["status"], lease["start"], lease["shape"], lease["duration"], lease["name"]) == (
        status, rfc3339(start), offer["shape"], offer["duration"], "taken")
    assert reply.get_json()["offers"] == []


def test_an_offer_taken_with_dry_run_previews_the_lease_it_makes(client, full):
    for offer in preview(client)["offers"]:
        shown = preview(client, {**ASK, "accept_offer": offer["id"]})
        assert (shown["lease"]["start"], shown["lease"]["shape"], shown["offers"]) == (
            offer["start"], offer["shape"], [])


def test_an_offer_that_no_longer_holds_is_a_409_and_makes_nothing(client, full, sessions):
    h100 = preview(client)["offers"][0]
    assert client.post("/v1/leases", json={"shape": "h100.x2", "duration": "1h"},
                       headers=headers("nlp-lab")).get_json()["lease"]["status"] == "scheduled"   # took the H100s
    before = lease_count(sessions)
    error = api_error(client.post("/v1/leases", json={**ASK, "accept_offer": h100["id"]}, headers=headers()), 409)
    assert error["code"] == "gpu_tenancy.offer_gone"
    assert error["detail"].startswith("the offer no longer holds: it started now, and the plan now gives a start at ")
    assert lease_count(sessions) == before


def test_an_expired_offer_is_a_409(client, full, runtime):
    offer = preview(client)["offers"][0]
    runtime.clock.advance(301)
    error = api_error(client.post("/v1/leases", json={**ASK, "accept_offer": offer["id"]}, headers=headers()), 409)
    assert error["code"] == "gpu_tenancy.offer_expired"


def test_an_offer_taken_after_its_reserved_start_starts_now(client, full, runtime, engine_tick):
    """Offers held longer than a start's slack (offer_valid_seconds up to a day): a reserved start
    (`later`; `borrow`'s is the moment it was made) that has passed by the time the offer is
    taken is now, not a start in the past the tenant never gave."""
    runtime._offers = replace(runtime.offers, valid_seconds=12 * H)   # as offer_valid_seconds: 43200 sets it
    later = preview(client)["offers"][2]
    assert (later["kind"], later["start"], later["reserved"]) == ("later", rfc3339(T0 + 10 * H), True)
    engine_tick(advance=10 * H + 600)                  # the first lease has ended: its host is free
    engine_tick()
    reply = client.post("/v1/leases", json={**ASK, "accept_offer": later["id"]}, headers=headers())
    assert reply.status_code == 201, reply.get_json()
    assert reply.get_json()["lease"]["start"] == rfc3339(runtime.clock.now())


def test_a_changed_or_another_projects_offer_is_a_400(client, full, sessions):
    offer = preview(client)["offers"][0]["id"]
    version, payload, mac = offer.split(".")
    changed = f"{version}.{payload[:-2]}{'A' if payload[-2] != 'A' else 'B'}{payload[-1]}.{mac}"
    before = lease_count(sessions)
    for token, project in ((changed, "ml-vision"), (offer, "nlp-lab"), ("not-an-offer", "ml-vision")):
        error = api_error(client.post("/v1/leases", json={**ASK, "accept_offer": token},
                                      headers=headers(project)), 400)
        assert error["code"] == "gpu_tenancy.bad_offer"
    assert lease_count(sessions) == before


@pytest.mark.parametrize("query", ["", "?dry_run=true"])
def test_an_offer_token_that_is_not_ascii_is_a_400(client, full, sessions, query):
    """hmac.compare_digest takes only ASCII text: such a token was a 500."""
    version, payload, mac = preview(client)["offers"][0]["id"].split(".")
    before = lease_count(sessions)
    for token in ("o1.x.\u00e9", f"{version}.{payload}.{mac[:-1]}\u00e9", f"{version}.\u00e9{payload}.{mac}"):
        error = api_error(client.post("/v1/leases" + query, json={**ASK, "accept_offer": token},
                                      headers=headers()), 400)
        assert error["code"] == "gpu_tenancy.bad_offer"
    assert lease_count(sessions) == before


def test_a_lease_that_waits_is_answered_with_offers_that_replace_it(client, full, sessions):
    reply = client.post("/v1/leases", json=ASK, headers=headers())
    waiting = reply.get_json()["lease"]
    assert (reply.status_code, waiting["status"]) == (201, "queued")
    offers = reply.get_json()["offers"]
    assert [o["kind"] for o in offers] == ["gpu_model", "shorter", "later"]
    taken = client.post("/v1/leases", json={**ASK, "accept_offer": offers[0]["id"]}, headers=headers())
    assert taken.status_code == 201 and taken.get_json()["lease"]["status"] == "scheduled"
    assert client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]["status"] == "cancelled"
    again = api_error(client.post("/v1/leases", json={**ASK, "accept_offer": offers[1]["id"]}, headers=headers()),
                      409)
    assert again["code"] == "gpu_tenancy.offer_gone" and waiting["id"] in again["detail"]


def test_a_lease_that_starts_as_asked_has_no_offers(client):
    assert preview(client)["offers"] == []


def test_an_offer_made_by_one_worker_is_taken_by_another_on_the_same_database(client, full, config, clock, cloud):
    """No offer_secret nor dashboard_token_keys: the workers share the key through the
    database (one made it, the others read it), not one each."""
    assert not (config.offer_secret or config.dashboard_token_keys)
    other_worker = create_app(replace(config, run_engine=False), clock=clock, cloud=cloud, start_engine=False)
    try:
        assert other_worker.extensions["gpu_tenancy"].offers.key == client.application.extensions[
            "gpu_tenancy"].offers.key
        offer = preview(client)["offers"][0]
        reply = other_worker.test_client().post("/v1/leases", json={**ASK, "accept_offer": offer["id"]},
                                                headers=headers())
        assert reply.status_code == 201, reply.get_json()
        assert reply.get_json()["lease"]["shape"] == "h100.x2"
        forged = other_worker.test_client().post("/v1/leases", json={**ASK, "accept_offer": offer["id"][:-2] + "xx"},
                                                 headers=headers())
        assert forged.status_code == 400, forged.get_json()
    finally:
        other_worker.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


@pytest.mark.parametrize("fit", [False, True], ids=["replanned", "fitted"])
def test_a_waiting_create_is_offered_what_the_dry_run_offers(client, full, runtime, fit):
    """Fitted into the plan (a long queue: engine/plan_insert.py), the offers come from that
    plan rather than a second, full one; here they are the same."""
    runtime.fits.min_waiting = 0 if fit else 10**6
    before = value(scrape(client), "gpu_tenancy_lease_create_replans_total", outcome="fitted")
    shown = [(o["kind"], o["shape"], o["duration"], o["start"], o["reserved"]) for o in preview(client)["offers"]]
    reply = client.post("/v1/leases", json=ASK, headers=headers())
    assert reply.status_code == 201 and reply.get_json()["lease"]["status"] == "queued"
    assert value(scrape(client), "gpu_tenancy_lease_create_replans_total", outcome="fitted") == before + fit
    offers = reply.get_json()["offers"]
    assert [(o["kind"], o["shape"], o["duration"], o["start"], o["reserved"]) for o in offers] == shown
    assert len(shown) == 3
    taken = client.post("/v1/leases", json={**ASK, "accept_offer": offers[1]["id"]}, headers=headers())
    assert taken.status_code == 201 and taken.get_json()["lease"]["start"] == rfc3339(T0)


@pytest.mark.parametrize("fit", [False, True], ids=["replanned", "fitted"])
def test_a_waiting_preemptible_create_is_offered_nothing_and_nothing_fails(client, full, runtime, fit, caplog):
    """As its dry run: a preemptible lease takes idle GPUs only and has no alternatives (the
    offers of a full plan once failed on it, logged, for every such create that waited)."""
    runtime.fits.min_waiting = 0 if fit else 10**6
    body = {**ASK, "priority_class": "preemptible"}
    assert preview(client, body)["offers"] == []
    with caplog.at_level("ERROR", logger="gpu_tenancy"):
        reply = client.post("/v1/leases", json=body, headers=headers())
    assert reply.status_code == 201 and reply.get_json()["lease"]["status"] == "queued", reply.get_json()
    assert reply.get_json()["offers"] == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@pytest.mark.parametrize("fit", [False, True], ids=["replanned", "fitted"])
def test_a_create_that_takes_the_last_free_gpus_is_offered_nothing(client, runtime, fit):
    """It starts as asked: there is nothing to offer. Replanned after its create, the offers
    were worked out for the lease as it was made (queued), with its own new hold in the plan,
    so a lease taking the last A100s was told to take H100 instead or wait for itself, and
    taking either was a 409."""
    runtime.fits.min_waiting = 0 if fit else 10**6
    first = client.post("/v1/leases", json=ASK, headers=headers())
    assert first.status_code == 201 and first.get_json()["offers"] == []
    last = client.post("/v1/leases", json=ASK, headers=headers())
    assert last.status_code == 201 and last.get_json()["lease"]["status"] == "scheduled", last.get_json()
    assert last.get_json()["offers"] == []

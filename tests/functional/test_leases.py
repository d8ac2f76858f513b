"""Leases through the API on the simulated cloud and a virtual clock."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import RELEASE, T0, headers

HOUR = 3600


def ask(client, project="ml-vision", expect=201, query="", **body):
    body.setdefault("shape", "a100.x2")
    body.setdefault("duration", "PT1H")
    response = client.post("/v1/leases" + query, json=body, headers=headers(project))
    assert response.status_code == expect, response.get_json()
    return response.get_json()


def lease_count(sessions) -> int:
    with sessions() as s:
        return s.scalar(select(func.count()).select_from(m.Lease))


def test_a_lease_that_fits_becomes_active_with_its_volume(client, cloud, engine_tick):
    lease = ask(client, name="first", volume={"size_gb": 100})["lease"]
    assert lease["status"] == "scheduled"
    assert lease["start"] == rfc3339(T0) and lease["end"] == rfc3339(T0 + HOUR)
    assert len(lease["allocations"]) == 1 and lease["allocations"][0]["gpus"] == 2
    engine_tick()                      # provisioning: flavor, volume, boot requested
    shown = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] == "provisioning"
    engine_tick(advance=30)            # the simulated boot takes 20 s
    shown = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] == "active"
    server = shown["servers"][0]
    assert server["status"] == "ACTIVE" and server["host"] == lease["allocations"][0]["host"]
    assert cloud.allocations()[server["id"]] == (server["host"], 2)
    volume = cloud.volumes()[shown["volume"]["id"]]
    assert volume["status"] == "in-use" and volume["attached_to"] == server["id"]


def fill_cluster(client):
    """32 A100 in all: ml-vision takes 16 (one lease for 24 h, one for 6 h), nlp-lab 16 for 12 h."""
    long = ask(client, shape="a100.x8", duration="PT24H")["lease"]
    short = ask(client, shape="a100.x8", duration="PT6H")["lease"]
    nlp = ask(client, project="nlp-lab", shape="a100.x8", instances=2, duration="PT12H")["lease"]
    assert {long["status"], short["status"], nlp["status"]} == {"scheduled"}
    return long, short, nlp


def test_a_lease_beyond_free_capacity_waits_with_position_eta_and_reason(client, clock):
    _, short, _ = fill_cluster(client)
    waiting = ask(client, shape="a100.x4", duration="PT1H")["lease"]
    assert waiting["status"] == "queued"
    queue = waiting["queue"]
    assert queue["position"] == 1
    assert short["end"] == rfc3339(T0 + 6 * HOUR)
    assert queue["eta"] == rfc3339(T0 + 6 * HOUR + RELEASE)  # the end of the lease it waits for, and the release
    codes = {r["code"] for r in queue["reasons"]}
    assert codes & {"capacity", "quota"}, queue["reasons"]
    assert all(r["message"] for r in queue["reasons"])
    clock.advance(1)   # asked later: behind the first
    second = ask(client, project="nlp-lab", shape="a100.x8", duration="PT1H")["lease"]
    assert second["queue"]["position"] == 2


def test_the_waiting_lease_starts_on_its_own_when_the_one_before_ends(client, engine_tick):
    _, short, _ = fill_cluster(client)
    waiting = ask(client, shape="a100.x4", duration="PT1H")["lease"]
    engine_tick()
    engine_tick(advance=30)
    engine_tick(advance=6 * HOUR - 30)   # the 6 h lease ends now: its VMs are deleted
    engine_tick(advance=10)              # its GPUs are released; the waiting lease is placed
    engine_tick(advance=30)
    ended = client.get(f"/v1/leases/{short['id']}", headers=headers()).get_json()["lease"]
    started = client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]
    assert ended["status"] == "ended"
    assert started["status"] == "active"
    assert T0 + 6 * HOUR <= parse_time(started["start"]) <= T0 + 6 * HOUR + 10


def test_dry_run_gives_the_plan_and_creates_nothing(client, sessions):
    fill_cluster(client)
    before = lease_count(sessions)
    preview = ask(client, expect=200, query="?dry_run=true", shape="a100.x4")["lease"]
    assert preview["status"] == "preview" and preview["id"] is None
    assert preview["queue"]["eta"] == rfc3339(T0 + 6 * HOUR + RELEASE)
    assert lease_count(sessions) == before


def test_bad_requests_are_refused_clearly_and_leave_nothing(client, sessions):
    cases = [
        ({"shape": "a100.x3"}, 400, "unknown shape"),
        ({"image": "windows-95"}, 400, "unknown image"),
        ({"duration": "P30D"}, 400, "maximum"),
        ({"duration": "PT-1H"}, 400, "duration"),
        ({"duration": "soon"}, 400, "such as PT24H, P2D, 24h"),
        ({"duration": 24}, 400, "give a unit, such as 24h"),       # a day meant, 24 s would be made
        ({"duration": "1-25:00:00"}, 400, "days-]hours:minutes:seconds"),
        ({"duration": 0}, 400, "duration"),
        ({"start": rfc3339(T0 - 86400)}, 400, "in the past"),
        ({"start": "2026-12-01 25:00"}, 400, "RFC 3339"),
        ({"start": "2026-12-02T10:00:00"}, 400, "time zone"),
        ({"latest_start": rfc3339(T0 - 10), "start": "now"}, 400, "before start"),
        ({"instances": "two"}, 400, "instances"),
        ({"instances": 0}, 400, "instances"),
        ({"instances": 4, "shape": "a100.x8"}, 403, "may hold"),
        ({"shape": "h100.x4", "instances": 1, "priority": 5}, 403, "priority"),
        ({"name": "x" * 10000}, 400, "name"),
        ({"colour": "blue"}, 400, "colour"),
        ({"volume": {"size_gb": -5}}, 400, "volume"),
    ]
    for body, status, words in cases:
        response = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H", **body},
                               headers=headers())
        assert response.status_code == status, (body, response.get_json())
        error = response.get_json()["errors"][0]
        assert error["status"] == status and words.lower() in error["detail"].lower(), (body, error)
        assert error["request_id"] == response.headers["X-OpenStack-Request-Id"]
    response = client.post("/v1/leases", data="{not json", headers={**headers(), "Content-Type": "application/json"})
    assert response.status_code == 400
    assert lease_count(sessions) == 0


def test_more_than_the_cloud_could_ever_hold_is_refused(client, sessions):
    with sessions.begin() as s:
        s.get(m.Quota, ("ml-vision", "H100")).gpus = 100
    response = client.post("/v1/leases", json={"shape": "h100.x4", "instances": 3, "duration": "PT1H"},
                           headers=headers())
    assert response.status_code == 400
    assert "the cloud has 8" in response.get_json()["errors"][0]["detail"]
    response = client.post("/v1/leases", json={"shape": "h100.x4", "instances": 2, "duration": "PT1H"},
                           headers=headers())
    assert response.status_code == 201


def test_extension_is_granted_unless_it_delays_someone(client):
    long, short, nlp = fill_cluster(client)
    ok = client.patch(f"/v1/leases/{long['id']}", json={"duration": "PT30H"}, headers=headers())
    assert ok.status_code == 200 and ok.get_json()["lease"]["end"] == rfc3339(T0 + 30 * HOUR)
    waiting = ask(client, shape="a100.x8", duration="PT1H")["lease"]   # waits for the 6 h lease
    assert waiting["queue"]["eta"] == rfc3339(T0 + 6 * HOUR + RELEASE)
    refused = client.patch(f"/v1/leases/{short['id']}", json={"end": rfc3339(T0 + 8 * HOUR)},
                           headers=headers())
    assert refused.status_code == 409
    assert waiting["id"] in refused.get_json()["errors"][0]["detail"]
    unasked = client.patch(f"/v1/leases/{short['id']}", json={"end": rfc3339(T0 + 2 * HOUR)}, headers=headers())
    assert unasked.status_code == 409 and "shrink" in unasked.get_json()["errors"][0]["detail"]
    shrink = client.patch(f"/v1/leases/{short['id']}", json={"end": rfc3339(T0 + 2 * HOUR), "shrink": True},
                          headers=headers())
    assert shrink.status_code == 200
    moved = client.get(f"/v1/leases/{waiting['id']}", headers=headers()).get_json()["lease"]
    assert moved["queue"]["eta"] == rfc3339(T0 + 2 * HOUR + RELEASE)


def test_cancel_waiting_and_end_running_keeps_the_volume(client, cloud, engine_tick):
    running = ask(client, volume={"size_gb": 10})["lease"]
    engine_tick()
    engine_tick(advance=30)
    fill = ask(client, project="nlp-lab", shape="a100.x8", instances=2, duration="PT12H")["lease"]
    assert fill["status"] == "scheduled"
    queued = ask(client, shape="a100.x8", instances=2, duration="PT1H")["lease"]
    assert queued["status"] == "queued"
    assert client.delete(f"/v1/leases/{queued['id']}", headers=headers()).status_code == 204
    gone = client.get(f"/v1/leases/{queued['id']}", headers=headers()).get_json()["lease"]
    assert gone["status"] == "cancelled" and gone["allocations"] == []
    assert client.delete(f"/v1/leases/{running['id']}", headers=headers()).status_code == 204
    engine_tick(advance=1)    # the engine deletes the VM
    engine_tick(advance=10)   # and sees its GPUs released
    ended = client.get(f"/v1/leases/{running['id']}", headers=headers()).get_json()["lease"]
    assert ended["status"] == "ended"
    assert cloud.volumes()[ended["volume"]["id"]]["status"] == "available"
    assert not any(s["lease_id"] == running["id"] for s in cloud.servers().values())
    again = client.delete(f"/v1/leases/{running['id']}", headers=headers())
    assert again.status_code == 409


def test_a_lease_whose_latest_start_passes_expires(client, engine_tick):
    fill_cluster(client)
    late = ask(client, shape="a100.x8", duration="PT1H", latest_start=rfc3339(T0 + HOUR))["lease"]
    assert late["status"] == "queued"
    assert any(r["code"] == "latest_start" for r in late["queue"]["reasons"])
    engine_tick(advance=HOUR + 1)
    shown = client.get(f"/v1/leases/{late['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] == "expired"


def test_a_reservation_in_the_future_is_scheduled_for_its_time(client, engine_tick):
    later = rfc3339(T0 + 2 * HOUR)
    lease = ask(client, start=later, duration="PT1H")["lease"]
    assert lease["status"] == "scheduled" and lease["start"] == later
    engine_tick(advance=HOUR)
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "scheduled"
    engine_tick(advance=HOUR)
    engine_tick(advance=30)
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["status"] == "active"


def test_listing_pages_with_limit_and_marker(client, clock):
    ids = []
    for i in range(5):
        ids.append(ask(client, name=f"l{i}", shape="a100.x1", duration="PT1H")["lease"]["id"])
        clock.advance(1)
    first = client.get("/v1/leases?limit=2", headers=headers()).get_json()
    assert [lease["id"] for lease in first["leases"]] == ids[:2]
    next_href = first["leases_links"][0]["href"]
    second = client.get(next_href.split("localhost", 1)[1], headers=headers()).get_json()
    assert [lease["id"] for lease in second["leases"]] == ids[2:4]
    queued = client.get("/v1/leases?status=queued", headers=headers()).get_json()["leases"]
    assert queued == []
    assert client.get("/v1/leases?status=bogus", headers=headers()).status_code == 400


def test_the_next_link_keeps_every_filter_and_takes_no_query_key_as_its_own(client, clock):
    """The link once came from url_for(**query): a key it takes itself (endpoint, _external,
    _method, _anchor) was a 500 or a wrong link, and of repeated status= values one was kept."""
    ids = []
    for i in range(3):
        ids.append(ask(client, name=f"l{i}", shape="a100.x8", instances=2)["lease"]["id"])   # one scheduled
        clock.advance(1)
    query = "limit=1&status=scheduled&status=queued&endpoint=x&_external=0&_method=POST&_anchor=a"
    first = client.get(f"/v1/leases?{query}", headers=headers())
    assert first.status_code == 200, first.get_json()
    href = first.get_json()["leases_links"][0]["href"]
    assert href.startswith("http://localhost/v1/leases?")
    for kept in ("status=scheduled", "status=queued", "endpoint=x", "_external=0", "_method=POST", "_anchor=a",
                 f"marker={ids[0]}"):
        assert kept in href, (kept, href)
    second = client.get(href.split("localhost", 1)[1], headers=headers()).get_json()
    assert [lease["id"] for lease in second["leases"]] == [ids[1]]
    third = client.get(second["leases_links"][0]["href"].split("localhost", 1)[1], headers=headers()).get_json()
    assert [lease["id"] for lease in third["leases"]] == [ids[2]] and "leases_links" not in third


def test_the_default_page_is_no_longer_than_the_operators_max_page_size(client, clock, runtime):
    """The default page (100) was given whatever max_page_size said: an operator who set it to 3
    bounded only the pages a client asked for, and a plain GET listed up to 100."""
    runtime.config.max_page_size = 3
    for i in range(5):
        ask(client, name=f"l{i}", shape="a100.x1", duration="PT1H")
        clock.advance(1)
    body = client.get("/v1/leases", headers=headers()).get_json()
    assert len(body["leases"]) == 3 and body["leases_links"][0]["rel"] == "next"
    records = client.get("/v1/audit", headers=headers("ops", "admin")).get_json()
    assert len(records["audit_records"]) == 3 and "audit_records_links" in records


@pytest.mark.parametrize("limit", ["1_0", " 1", "\u0661", "1.0", "0x10", "", "--5", "9" * 40])
def test_a_limit_is_ascii_digits(client, limit):
    reply = client.get("/v1/leases", query_string={"limit": limit}, headers=headers())
    assert reply.status_code == 400 and reply.get_json()["errors"][0]["code"] == "gpu_tenancy.invalid_query"


def test_nul_characters_are_refused_not_stored(client, sessions):
    for body in ({"shape": "a100\u0000x2"}, {"name": "a\u0000b"}, {"user_data": "#!/bin/sh\u0000"},
                 {"volume": {"id": "\u0000"}}):
        response = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H", **body},
                               headers=headers())
        assert response.status_code == 400, body
    assert client.get("/v1/leases?marker=%00", headers=headers()).status_code == 400
    assert lease_count(sessions) == 0


def test_leases_listed_newest_first_page_by_page(client, clock):
    ids = []
    for n in range(5):
        ids.append(client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "name": f"l{n}"},
                               headers=headers()).get_json()["lease"]["id"])
        clock.advance(1 if n != 2 else 0)   # two of one second: ordered by id there
    listed, url = [], "/v1/leases?sort_dir=desc&limit=2"
    while url:
        body = client.get(url, headers=headers()).get_json()
        listed += body["leases"]
        url = body.get("leases_links", [{}])[0].get("href", "").replace("http://localhost", "") or None
    oldest_first = client.get("/v1/leases", headers=headers()).get_json()["leases"]
    assert listed == oldest_first[::-1] and sorted(lease["id"] for lease in listed) == sorted(ids)
    assert any(lease["allocations"] for lease in listed)   # each page's allocations are its own leases' (the bounds)
    bad = client.get("/v1/leases?sort_dir=up", headers=headers())
    assert bad.status_code == 400 and bad.get_json()["errors"][0]["code"] == "gpu_tenancy.invalid_query"


def add_events(sessions, lease_id: str, count: int, seed: int) -> None:
    """`count` more events on the lease, as a guest's readiness reports add them (one per VM every
    15 s while it runs), written straight to the database."""
    import random

    from gpu_tenancy.db.session import utcnow_naive
    rng = random.Random(seed)
    with sessions() as s:
        for i in range(count):
            s.add(m.Event(lease_id=lease_id, at=utcnow_naive(T0 + 15 * i), actor="guest",
                          kind=rng.choice(["progress", "warning"]), message=f"VM {rng.randrange(4)} report {i}"))
        s.commit()


@pytest.mark.parametrize("seed", range(3))
def test_a_leases_events_come_a_page_at_a_time_and_the_pages_hold_each_once_in_order(client, runtime, seed):
    """GET /v1/leases/{id}/events listed every event of the lease in one answer, and a lease's events
    grow as long as it runs (its guest's readiness reports, one per VM every 15 s: 40,000 a week on one
    VM). Paged as the listing is: walked with any page sizes, both ways, each event once, in order."""
    import random

    from tests.functional.test_openapi import response_validator
    rng = random.Random(seed)
    runtime.config.max_page_size = 40
    lease = ask(client, name="chatty")["lease"]
    add_events(runtime.sessions, lease["id"], rng.randrange(50, 200), seed)
    with runtime.sessions() as s:
        expected = list(s.scalars(select(m.Event.message).where(m.Event.lease_id == lease["id"]).order_by(m.Event.id)))
    validate = response_validator(client.get("/v1/openapi.json").get_json(), "/v1/leases/{lease_id}/events",
                                  "get", 200).validate
    first = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()
    assert len(first["events"]) == 40 and "events_links" in first   # the default page, at most max_page_size
    validate(first)
    for direction, order in (("asc", expected), ("desc", expected[::-1])):
        seen: list[str] = []
        limit = rng.randrange(1, 41)
        url: str | None = f"/v1/leases/{lease['id']}/events?sort_dir={direction}&limit={limit}"
        while url:
            body = client.get(url, headers=headers()).get_json()
            validate(body)
            assert len(body["events"]) <= limit
            seen += [e["message"] for e in body["events"]]
            url = body["events_links"][0]["href"].replace("http://localhost", "") if "events_links" in body else None
            if url:
                limit = rng.randrange(1, 41)
                url = url.replace(f"limit={url.split('limit=')[1].split('&')[0]}", f"limit={limit}")
        assert seen == order
    for bad in ("-1", "abc", "1" * 12):
        reply = client.get(f"/v1/leases/{lease['id']}/events?marker={bad}", headers=headers())
        assert reply.status_code == 400 and reply.get_json()["errors"][0]["code"] == "gpu_tenancy.invalid_marker"
    assert client.get(f"/v1/leases/{lease['id']}/events?limit=41", headers=headers()).status_code == 400


def test_the_cli_reads_every_event_across_the_pages_and_waits_on_only_the_new(client, runtime):
    """`openstack gpu lease create --wait` follows the events: it reads every page, and each poll
    asks only for those after the ones it has shown (not the whole history again)."""
    import io

    pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
    from gpu_tenancy.osc.client import GpuClient
    from gpu_tenancy.osc.lease import wait_for_lease
    from tests.functional.test_osc_queue_share import ApiHttp
    runtime.config.max_page_size = 30
    lease = ask(client, name="chatty")["lease"]
    add_events(runtime.sessions, lease["id"], 100, 0)
    http = ApiHttp(client)
    gpu = GpuClient(http, "ml-vision")
    events = gpu.lease_events(lease["id"])
    with runtime.sessions() as s:
        total = s.scalar(select(func.count()).select_from(m.Event).where(m.Event.lease_id == lease["id"]))
    assert len(events) == total > 100
    assert [e["message"] for e in gpu.lease_events(lease["id"], after=total - 2)] == [e["message"] for e in events[-2:]]
    polls = iter([None, None])
    out = io.StringIO()
    states = iter(["scheduled", "scheduled", "active"])
    real_lease = gpu.lease
    gpu.lease = lambda lease_id: {**real_lease(lease_id), "status": next(states)}   # type: ignore[method-assign]
    http.asked.clear()
    wait_for_lease(gpu, lease, out, sleep=lambda _: next(polls))
    assert out.getvalue().count("report 99") == 1 and out.getvalue().count("report 0\n") == 1
    assert len(out.getvalue().splitlines()) == total
    later = [path for path in http.asked if "/events" in path][-1]
    assert f"marker={total}" in later   # the last poll asked only for what came after

"""A newcomer's first hour (issue 19): each trap a new user hit, as a test that failed before."""
from __future__ import annotations

import pytest

from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import headers


def test_the_dashboard_address_the_banner_prints_leads_to_the_login_not_a_json_401(client):
    """Trap 1: /dashboard (no slash) answered a raw JSON 401; now it redirects to /dashboard/,
    which sends a visitor without a session to the login page."""
    bare = client.get("/dashboard")
    assert bare.status_code in (301, 308) and bare.headers["Location"].endswith("/dashboard/")
    page = client.get("/dashboard", follow_redirects=True)
    assert page.status_code == 200 and b"<form" in page.data and b"login" in page.data.lower()
    api = client.get("/v1/leases")   # the API still answers 401 in its own form
    assert api.status_code == 401 and api.get_json()["errors"][0]["code"] == "gpu_tenancy.unauthenticated"


def test_a_name_finds_one_lease_a_second_unfinished_lease_of_that_name_is_refused(client, engine_tick):
    """Trap 6: the README's curl and CLI examples both made 'first', after which `lease show first`
    could only say '2 leases are named first'. Now the second gets 409 naming the first; another
    project may use the name, and the name is free again once the first is finished."""
    body = {"name": "first", "shape": "a100.x1", "duration": "PT1H"}
    made = client.post("/v1/leases", json=body, headers=headers())
    assert made.status_code == 201
    first = made.get_json()["lease"]["id"]
    again = client.post("/v1/leases", json=body, headers=headers())
    assert again.status_code == 409
    error = again.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.lease_name_taken" and first in error["detail"]
    dry = client.post("/v1/leases?dry_run=true", json=body, headers=headers())
    assert dry.status_code == 200                         # a preview makes nothing, so takes no name
    assert client.post("/v1/leases", json=body, headers=headers("nlp-lab")).status_code == 201
    assert len(client.get("/v1/leases", headers=headers()).get_json()["leases"]) == 1   # nothing half-made
    assert client.delete(f"/v1/leases/{first}", headers=headers()).status_code in (200, 202, 204)
    engine_tick()
    assert client.post("/v1/leases", json=body, headers=headers()).status_code == 201


def test_an_extension_never_shortens_shortening_is_its_own_ask(client, engine_tick):
    """Trap 4: `lease extend X --duration P1D` on a 30-hour lease cut 6 h off it, and PATCH with an
    earlier end answered 200. Now both are refused (409, saying by how much) unless the caller
    says `shrink`; nothing about the lease changes on a refusal."""
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "30h"}, headers=headers())
    lease = lease.get_json()["lease"]
    engine_tick()
    an_hour_earlier = rfc3339(parse_time(lease["end"]) - 3600)
    for change in ({"duration": "P1D"}, {"end": an_hour_earlier}):
        refused = client.patch(f"/v1/leases/{lease['id']}", json=change, headers=headers())
        assert refused.status_code == 409, refused.get_json()
        error = refused.get_json()["errors"][0]
        assert error["code"] == "gpu_tenancy.would_shorten" and '"shrink": true' in error["detail"]
    after = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert (after["end"], after["duration"]) == (lease["end"], lease["duration"])
    longer = client.patch(f"/v1/leases/{lease['id']}", json={"duration": "31h"}, headers=headers())
    assert longer.status_code == 200
    shorter = client.patch(f"/v1/leases/{lease['id']}", json={"duration": "P1D", "shrink": True}, headers=headers())
    assert shorter.status_code == 200 and shorter.get_json()["lease"]["duration"] in (86400, "P1D")
    for bad in ({"shrink": True}, {"end": lease["end"], "duration": "P1D"}, {}):
        assert client.patch(f"/v1/leases/{lease['id']}", json=bad, headers=headers()).status_code == 400


def test_a_waiting_leases_new_duration_is_told_in_hours_not_seconds(client):
    """The lease's events spoke in seconds ("duration set to 10800 s") where a person reads them."""
    for project in ("ml-vision", "ml-vision", "nlp-lab", "nlp-lab"):   # the demo cloud's 32 A100, all taken
        client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H"}, headers=headers(project))
    waiting = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "2h"}, headers=headers()).get_json()
    assert waiting["lease"]["status"] == "queued"
    lease_id = waiting["lease"]["id"]
    assert client.patch(f"/v1/leases/{lease_id}", json={"duration": "PT3H30M"}, headers=headers()).status_code == 200
    events = client.get(f"/v1/leases/{lease_id}/events", headers=headers()).get_json()["events"]
    said = [e["message"] for e in events if e["kind"] == "change"]
    assert said == ["duration set to 3 h 30 min"], events


def test_asking_for_more_gpus_than_the_cloud_has_says_what_the_cloud_has(client):
    """Trap 9: 5 x a100.x8 (40 GPUs) on a cloud of 32 A100 got the quota's "may hold 16 (+8)";
    the cloud's size is what rules it out."""
    for query in ("", "?dry_run=true"):
        reply = client.post(f"/v1/leases{query}", json={"shape": "a100.x8", "instances": 5, "duration": "1h"},
                            headers=headers())
        assert reply.status_code == 400
        error = reply.get_json()["errors"][0]
        assert error["code"] == "gpu_tenancy.never_fits" and "the cloud has 32" in error["detail"]


def test_the_capacity_calendar_takes_now_as_its_start(client, clock):
    """Trap 9: `--start now` was refused by /v1/capacity."""
    end = rfc3339(clock.now() + 86400)
    reply = client.get(f"/v1/capacity?start=now&end={end}", headers=headers())
    assert reply.status_code == 200, reply.get_json()
    assert reply.get_json()["capacity"]["calendar"]
    assert client.get(f"/v1/capacity?start=later&end={end}", headers=headers()).status_code == 400


def test_a_member_asking_for_every_projects_leases_is_told_no_not_quietly_narrowed(client):
    """Trap 10: `--all-projects` from a member was silently ignored (their own leases came back)."""
    assert client.get("/v1/leases?all_projects=true", headers=headers()).status_code == 403
    assert client.get("/v1/leases?all_projects=true", headers=headers(roles="admin")).status_code == 200
    assert client.get("/v1/leases", headers=headers()).status_code == 200


def test_a_preview_that_starts_now_has_no_queue_place(client):
    """Trap 10: the preview said "start now" and "wait at position 1" together. A lease that would
    start now has no place in the queue (as a created one has none once scheduled); one that
    would wait has its place and ETA."""
    now = client.post("/v1/leases?dry_run=true", json={"shape": "a100.x1", "duration": "1h"},
                      headers=headers()).get_json()["lease"]
    assert now["start"] is not None and now["queue"]["position"] is None and now["queue"]["eta"] is None
    for i in range(4):   # fill the A100 hosts (16 of the 32 GPUs in quota, +8 borrowed: 3 x 8 fit)
        client.post("/v1/leases", json={"shape": "a100.x8", "duration": "2h", "name": f"big-{i}"},
                    headers=headers("nlp-lab" if i % 2 else "ml-vision"))
    later = client.post("/v1/leases?dry_run=true", json={"shape": "a100.x8", "duration": "1h"},
                        headers=headers()).get_json()["lease"]
    assert later["queue"]["position"] >= 1 and later["queue"]["eta"] == later["start"]
    assert len(client.get("/v1/leases", headers=headers()).get_json()["leases"]) == 2   # previews make nothing


def test_a_new_lease_is_told_at_once_what_the_engine_tells_it_and_its_eta_counts_on_the_reclaim(
        client, engine_tick):
    """Trap 5: the 201 answer lacked the borrowing reason that appeared on the engine's next pass,
    and the ETA ignored the reclaim that reason announced. ml-vision holds its 16 A100 and borrows
    8 more from 08:00 to 18:00; at 08:30 nlp-lab asks for 16 within its quota. The borrowed lease
    may be reclaimed after 09:00 (its minimum runtime), with 15 minutes' notice and the cloud's 5 s
    release: nlp-lab's lease starts at 09:15:05, which is what the answer says from the first."""
    vision, nlp = headers("ml-vision"), headers("nlp-lab")
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=vision)
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"}, headers=vision)
    assert extra.get_json()["lease"]["borrowing"]
    engine_tick()
    engine_tick(advance=30 * 60)                                      # 08:30
    made = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"}, headers=nlp)
    answered = made.get_json()["lease"]
    announced = {"code": "borrowing", "message": "another project is borrowing 8 A100 until "
                                                 "2026-12-01T18:00:00Z; reclaim after 2026-12-01T09:00:00Z "
                                                 "(its minimum runtime of 1 hour)"}
    assert announced in answered["queue"]["reasons"]
    assert answered["queue"]["eta"] == answered["start"] == "2026-12-01T09:15:05Z"
    engine_tick(advance=5)                                            # the engine's next pass says the same
    shown = client.get(f"/v1/leases/{answered['id']}", headers=nlp).get_json()["lease"]
    assert (shown["queue"], shown["start"]) == (answered["queue"], answered["start"])
    engine_tick(advance=30 * 60 - 5)                                  # 09:00: the reclaim comes as announced
    shown = client.get(f"/v1/leases/{answered['id']}", headers=nlp).get_json()["lease"]
    assert shown["queue"]["eta"] == "2026-12-01T09:15:05Z"
    for _ in range(3):
        engine_tick(advance=300)                                      # 09:15: its notice is over
    engine_tick(advance=5)                                            # 09:15:05: its GPUs are back
    assert client.get(f"/v1/leases/{answered['id']}", headers=nlp).get_json()["lease"]["start"] == (
        "2026-12-01T09:15:05Z")


@pytest.mark.parametrize("act", ["cancel", "extend", "quota"])
def test_a_replan_the_api_runs_keeps_the_reclaim_a_waiting_lease_was_told_of_and_its_eta(client, engine_tick, act):
    """Trap 5, the other replans: a cancel, a change of end or a quota change replanned without
    reclaim and preemption, so a waiting lease lost its borrowing reason and the ETA counting on
    the reclaim until the engine's next pass gave them back. The case of the test above; then
    nlp-lab's unrelated H100 lease is cancelled or extended, or an admin sets a quota: at once,
    with no engine pass, the A100 lease still says what it was told, as the next pass does."""
    vision, nlp = headers("ml-vision"), headers("nlp-lab")
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=vision)
    client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"}, headers=vision)
    engine_tick()
    engine_tick(advance=30 * 60)                                      # 08:30
    other = client.post("/v1/leases", json={"shape": "h100.x1", "duration": "PT1H"}, headers=nlp)
    waits = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                        headers=nlp).get_json()["lease"]
    assert waits["queue"]["eta"] == "2026-12-01T09:15:05Z"
    assert "borrowing" in [r["code"] for r in waits["queue"]["reasons"]]
    other_id = other.get_json()["lease"]["id"]
    if act == "cancel":
        done = client.delete(f"/v1/leases/{other_id}", headers=nlp)
    elif act == "extend":
        done = client.patch(f"/v1/leases/{other_id}", json={"duration": "PT2H"}, headers=nlp)
    else:
        done = client.put("/v1/quotas/nlp-lab", json={"quota": {"gpu_models": {"H100": {"gpus": 4, "borrow_gpus": 2}}}},
                          headers=headers("nlp-lab", "admin"))
    assert done.status_code in (200, 204), done.get_json()

    def now_shown() -> tuple[dict, str]:
        shown = client.get(f"/v1/leases/{waits['id']}", headers=nlp).get_json()["lease"]
        return shown["queue"], shown["start"]
    assert now_shown() == (waits["queue"], waits["start"])           # right after the call
    engine_tick()                                                     # the engine's next pass says the same
    assert now_shown() == (waits["queue"], waits["start"])


def test_the_capacity_calendar_does_not_offer_gpus_a_queued_lease_is_planned_on(client, clock):
    """Trap 9: /v1/capacity?start&end showed GPUs as free where a queued lease was already planned.
    The A100 hosts are full until 10:00 (ml-vision's 16) and 12:00 (nlp-lab's 16); ml-vision's third
    a100.x8 waits, planned for 10:00:05-13:00:05. Over that span the calendar now says 8 GPUs are
    planned for it, and free only what nobody holds or is planned to hold."""
    vision, nlp = headers("ml-vision"), headers("nlp-lab")
    for who, hours in ((vision, 2), (nlp, 4)):
        made = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": f"{hours}h"},
                           headers=who)
        assert made.get_json()["lease"]["status"] == "scheduled"
    queued = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "3h", "name": "waits"},
                         headers=vision).get_json()["lease"]
    assert queued["status"] == "queued" and queued["start"] == "2026-12-01T10:00:05Z"
    end = rfc3339(clock.now() + 6 * 3600)
    body = client.get(f"/v1/capacity?start=now&end={end}", headers=headers("nlp-lab")).get_json()["capacity"]

    def at(t: str) -> tuple[int, int]:
        steps = [s for h in body["calendar"] if h["gpu_model"] == "A100" for s in h["free"]
                 if s["from"] <= t < s["to"]]
        return sum(s["free"] for s in steps), sum(s["planned"] for s in steps)
    assert at("2026-12-01T09:00:00Z") == (0, 0)
    assert at("2026-12-01T11:00:00Z") == (8, 8)     # 16 of ml-vision's back; 8 of them planned for "waits"
    assert at("2026-12-01T12:30:00Z") == (24, 8)    # nlp-lab's back too
    assert at("2026-12-01T13:30:00Z") == (32, 0)


def a100_planned_at(client, end: str, t: str) -> int:
    """The A100 GPUs the capacity calendar (now to `end`) says are planned for waiting leases at `t`."""
    body = client.get(f"/v1/capacity?start=now&end={end}", headers=headers("nlp-lab")).get_json()["capacity"]
    return sum(s["planned"] for h in body["calendar"] if h["gpu_model"] == "A100" for s in h["free"]
               if s["from"] <= t < s["to"])


def test_the_capacity_calendar_plans_once_per_replan_and_still_counts_a_new_lease(client, clock, monkeypatch):
    """Trap 9's calendar planned every waiting lease on each call: a tenant reading it in a loop
    cost a full plan a call. It now plans once per replan of the ledger (or once the engine's
    tick has passed): five calls in a row cost one plan, and a lease made between two calls is
    counted at once, since making it replanned."""
    from gpu_tenancy.domain import planner
    plans = []
    real_plan = planner.plan

    def counted(*args, **kwargs):
        plans.append(1)
        return real_plan(*args, **kwargs)
    monkeypatch.setattr(planner, "plan", counted)
    vision, nlp = headers("ml-vision"), headers("nlp-lab")
    for who, hours in ((vision, 2), (nlp, 4)):                        # the A100 hosts full until 10:00 and 12:00
        client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": f"{hours}h"}, headers=who)
    end = rfc3339(clock.now() + 6 * 3600)

    def planned_at(t: str) -> int:
        return a100_planned_at(client, end, t)
    assert planned_at("2026-12-01T11:00:00Z") == 0
    waits = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "3h"}, headers=vision)
    assert waits.get_json()["lease"]["start"] == "2026-12-01T10:00:05Z"
    plans.clear()
    assert [planned_at("2026-12-01T11:00:00Z") for _ in range(5)] == [8] * 5   # planned for 10:00:05-13:00:05
    assert len(plans) == 1
    clock.advance(5)                                                  # the engine's tick: time moved the plan
    assert planned_at("2026-12-01T11:00:00Z") == 8 and len(plans) == 2


def test_the_capacity_calendar_counts_a_lease_fitted_into_the_plan_and_one_taken_out(client, clock, runtime):
    """With a long queue a create is fitted into the plan (engine/plan_insert.py) and a cancel of a
    waiting lease takes it out (engine/plan_remove.py): neither replans. The calendar's plan was
    kept while the ledger had not replanned, so it showed, the same second, GPUs free that the
    lease just made was planned on, and planned ones the lease just cancelled no longer was."""
    runtime.fits.min_waiting = 0   # (as a queue of plan_insert_min_waiting leases does)
    vision, nlp = headers("ml-vision"), headers("nlp-lab")
    for who, hours in ((vision, 2), (nlp, 4)):                        # the A100 hosts full until 10:00 and 12:00
        client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": f"{hours}h"}, headers=who)
    end = rfc3339(clock.now() + 6 * 3600)

    def planned_at(t: str) -> int:
        return a100_planned_at(client, end, t)
    assert planned_at("2026-12-01T11:00:00Z") == 0
    waits = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "3h"}, headers=vision).get_json()["lease"]
    assert waits["status"] == "queued"
    assert planned_at("2026-12-01T11:00:00Z") == 8                    # fitted in: planned on at once
    assert client.delete(f"/v1/leases/{waits['id']}", headers=vision).status_code == 204
    assert planned_at("2026-12-01T11:00:00Z") == 0                    # taken out: no longer

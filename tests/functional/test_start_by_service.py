"""The start-by in the service: each project's margin ratio computed from the database
(engine/start_by_margins.py) is the model's (domain/start_by.py: StartBy fed the same leases),
and a lease that waits is told its ETA plus that margin, on both ways a create plans it."""
from __future__ import annotations

import random
from datetime import datetime

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain.start_by import FLOOR, StartBy, start_by
from gpu_tenancy.engine import start_by_margins
from tests.conftest import headers
from tests.functional.test_dashboard import login
from tests.functional.test_metrics import scrape, value

DAY = 86400
PROJECTS = {"big": (90, 170), "mid": (20, 45), "small": (0, 12)}   # leases each: some past WINDOW, some under MIN_OWN


def history(rng: random.Random, now: int) -> list[dict]:
    """Leases of the last 20 days: started (late, on time, early, or without waiting), waiting
    (some past their first ETA), cancelled, failed, and scheduled for later. Every time is
    distinct, so that the last WINDOW of anything is one set."""
    times = iter(rng.sample(range(now - 20 * DAY, now - 3600), 2000))
    leases = []
    for project, (least, most) in PROJECTS.items():
        for k in range(rng.randint(least, most)):
            created = next(times)
            asked = created + (rng.choice([0, 0, 0, rng.randint(60, DAY)]))   # some asked for a later start
            eta = max(created, asked) + rng.choice([0, 30, rng.randint(60, 2 * DAY)])
            kind = rng.choices(["started", "waiting", "cancelled", "failed", "later"], [60, 20, 8, 6, 6])[0]
            late = rng.choice([0, 0, rng.randint(1, 600), rng.randint(600, 3 * DAY), -rng.randint(1, 3600)])
            start = eta + late + k % 7   # + k % 7: distinct enough, and never before the ask
            if kind == "started" and rng.random() < 0.1:
                start = max(created, asked)   # did not wait
            status = {"started": rng.choice(["active", "ended", "provisioning", "preempted", "scheduled"]),
                      "waiting": "queued", "cancelled": "cancelled", "failed": "failed", "later": "scheduled"}[kind]
            if kind == "started" and start > now - 60:
                kind, status = "waiting", "queued"
            if kind == "later":
                start = now + rng.randint(60, DAY)
            leases.append({"id": f"{project}-{k:04d}", "project": project, "created": created, "asked": asked,
                           "eta": eta, "start": start, "kind": kind, "status": status})
    return leases


def model_ratios(leases: list[dict], now: int) -> dict[str, float]:
    """What the model says at `now`, each lease told at the start of its wait and started in
    time order; those that will not start by the model's reckoning (cancelled, failed, and
    scheduled for later: the service counts neither) forgotten."""
    model = StartBy()
    for x in sorted(leases, key=lambda x: max(x["created"], x["asked"])):
        model.tell(x["project"], x["id"], max(x["created"], x["asked"]), x["eta"])
    for x in sorted(leases, key=lambda x: x["start"]):
        if x["kind"] == "started":
            model.started(x["id"], x["start"])
        elif x["kind"] != "waiting":
            model.forget(x["id"])
    return {project: model.margin_ratio(project, now) for project in [*PROJECTS, "nobody"]}


def add(session, leases: list[dict]) -> None:
    for x in leases:
        session.add(m.Lease(id=x["id"], name=x["id"], project_id=x["project"], user_id="u", status=x["status"],
                            shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=1, duration=3600,
                            earliest_start=utcnow_naive(x["asked"]), start_at=utcnow_naive(x["start"]),
                            end_at=utcnow_naive(x["start"] + 3600), first_eta=utcnow_naive(x["eta"]),
                            queue_reasons=[], created_at=utcnow_naive(x["created"]),
                            updated_at=utcnow_naive(x["created"])))


@pytest.mark.parametrize("seed", range(12))
def test_the_margins_kept_are_the_models(sessions, clock, seed):
    """Seeded histories: the ratio refresh() keeps for each project, and everyone's, is the one
    StartBy computes from the same leases (its last 100 started that waited, its overdue ones,
    everyone's while it has fewer than 30)."""
    rng, now = random.Random(seed), clock.now()
    leases = history(rng, now)
    with session_scope(sessions) as session:
        add(session, leases)
    with session_scope(sessions) as session:
        start_by_margins.refresh(session, now)
    with session_scope(sessions) as session:
        kept = start_by_margins.read(session)
    expected = model_ratios(leases, now)
    assert {p: start_by_margins.ratio_of(kept, p) for p in expected} == expected
    assert expected["big"] > 0   # the seeds do make late leases


def test_a_waiting_lease_is_told_its_eta_plus_its_projects_margin(client, clock, engine_tick, sessions, runtime):
    """A project whose leases started late is told a start-by past the ETA, by its ratio times
    the planned wait; one with no history everyone's; on the create planned by a replan and on
    the one fitted into the plan; the lease's answer and its row agree, and later the start-by
    is told for the wait left."""
    now = clock.now()
    rng = random.Random(3)
    started = [x for x in history(rng, now) if x["project"] == "big" and x["kind"] == "started"]
    on_time = [{"id": f"on-time-{k}", "project": "nlp-lab", "created": now - 7200 + k, "asked": now - 7200 + k,
                "eta": now - 3600 + k, "start": now - 3600 + k} for k in range(10)]   # the last 10 to start
    with session_scope(sessions) as session:   # ended: none holds a GPU or waits
        add(session, [{**x, "project": "ml-vision", "id": f"old-{x['id']}", "status": "ended"} for x in started]
            + [{**x, "status": "ended"} for x in on_time])
    engine_tick()   # the margins computed
    with session_scope(sessions) as session:
        ratios = start_by_margins.read(session)
    own, everyone = ratios["ml-vision"], ratios["nlp-lab"]
    assert own > everyone == ratios[start_by_margins.EVERYONE]   # nlp-lab has fewer than 30: everyone's

    for project in ("ml-vision", "nlp-lab"):   # the whole A100 pool
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT5H"},
                            headers=headers(project))
        assert reply.get_json()["lease"]["status"] == "scheduled"
    told = []
    for k, (project, ratio, way) in enumerate((("ml-vision", own, "replanned"), ("nlp-lab", everyone, "fitted"),
                                               ("ml-vision", own, "fitted"))):
        runtime.fits.min_waiting = 0 if k else 100   # the first create replans; the next fit into the plan
        before = value(scrape(client), "gpu_tenancy_lease_create_replans_total", outcome=way)
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=headers(project))
        lease = reply.get_json()["lease"]
        assert reply.status_code == 201 and lease["status"] == "queued", lease
        assert value(scrape(client), "gpu_tenancy_lease_create_replans_total", outcome=way) == before + 1
        eta = epoch(lease["queue"]["eta"])
        assert eta > now + FLOOR
        assert epoch(lease["queue"]["start_by"]) == start_by(now, eta, ratio)
        with session_scope(sessions) as session:
            row = session.get_one(m.Lease, lease["id"])
            assert (to_epoch(row.first_eta), to_epoch(row.first_start_by)) == (eta, start_by(now, eta, ratio))
        told.append(lease)

    engine_tick(advance=3600)   # an hour on: the start-by of the wait left, the first one kept
    for lease in told:
        now_lease = client.get(f"/v1/leases/{lease['id']}", headers=headers(lease["project_id"])).get_json()["lease"]
        eta = epoch(now_lease["queue"]["eta"])
        with session_scope(sessions) as session:
            row = session.get_one(m.Lease, lease["id"])
            ratio_now = row.start_by_ratio
            assert to_epoch(row.first_start_by) == epoch(lease["queue"]["start_by"])
        assert epoch(now_lease["queue"]["start_by"]) == start_by(clock.now(), eta, ratio_now)
        assert epoch(now_lease["queue"]["start_by"]) < epoch(lease["queue"]["start_by"]) or ratio_now == 0
    # everyone's queue tells the start-by of the caller's own leases only (a margin says how late
    # a project's leases started)
    entries = client.get("/v1/queue", headers=headers()).get_json()["queue"]["leases"]
    mine = {e["lease_id"]: e["start_by"] for e in entries if not e["hidden"]}
    assert mine == {lease["id"]: client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()
                    ["lease"]["queue"]["start_by"] for lease in told if lease["project_id"] == "ml-vision"}
    assert [e["start_by"] for e in entries if e["hidden"]] == [None]
    # the dashboard's queue shows it beside the ETA
    login(client)
    listing = client.get("/dashboard/leases").text
    shown = client.get(f"/v1/leases/{told[0]['id']}", headers=headers()).get_json()["lease"]["queue"]
    assert shown["start_by"] != shown["eta"] and f'start by <time datetime="{shown["start_by"]}">' in listing
    assert f'start by <time datetime="{shown["start_by"]}">' in client.get("/dashboard/queue").text


def test_no_history_tells_the_eta_and_a_margin_needs_leases_that_waited(sessions, clock):
    """No lease has started: everyone's ratio is 0 (the start-by is the ETA); leases that
    started without waiting, or long ago, count for nothing."""
    now = clock.now()
    with session_scope(sessions) as session:
        assert start_by_margins.refresh(session, now) == {start_by_margins.EVERYONE: (0.0, 0)}
        add(session, [{"id": "at-once", "project": "p", "created": now - 7200, "asked": now - 7200,
                       "eta": now - 7200, "start": now - 7200, "status": "active"},
                      {"id": "old", "project": "p", "created": now - 40 * DAY, "asked": now - 40 * DAY,
                       "eta": now - 40 * DAY + 60, "start": now - 39 * DAY, "status": "ended"}])
    with session_scope(sessions) as session:
        assert start_by_margins.refresh(session, now) == {start_by_margins.EVERYONE: (0.0, 0)}
        assert session.scalars(select(m.StartByMargin.project_id)).all() == [start_by_margins.EVERYONE]


def epoch(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())

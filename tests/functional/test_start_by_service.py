"""The start-by in the service: each project's margin ratio, from the samples the ledger records
at first starts and the leases waiting past their ETA (engine/start_by_margins.py), is the
model's (domain/start_by.py: StartBy fed the same leases), and a lease that waits is told its
ETA plus that margin, on both ways a create plans it."""
from __future__ import annotations

import random
from datetime import datetime

import pytest
from markupsafe import escape
from sqlalchemy import delete, func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain.start_by import (FLOOR, FROM_EVERYONE, FROM_LOAD_CLASS, FROM_PROJECT, WINDOW, MarginBasis,
                                        StartBy, start_by, waits_from)
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.engine import ledger, start_by_margins
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers
from tests.functional.test_dashboard import login
from tests.functional.test_metrics import scrape, value

DAY = 86400
# leases each: "big" past WINDOW started and, in some seeds, overdue; "small" under MIN_OWN
PROJECTS = {"big": (250, 420), "mid": (20, 45), "small": (0, 12)}
KINDS = ["started", "waiting", "cancelled", "again"]   # again: started, then queued again (its host failed)


def history(rng: random.Random, now: int, burst: bool = False) -> list[dict]:
    """Leases of the last 20 days: told an ETA (some after they were asked for, some asked for a
    later start), then started (late, on time, early, or at once), still waiting (some past their
    ETA), cancelled, or started and queued again. Every time distinct, so that the last WINDOW of
    anything is one set. `burst`: "big" has half its leases waiting, most past their ETA."""
    times = iter(rng.sample(range(now - 20 * DAY, now - 3600), 3000))
    leases = []
    for project, (least, most) in PROJECTS.items():
        weights = [40, 50, 5, 5] if project == "big" and burst else [70, 15, 8, 7]
        for k in range(rng.randint(least, most)):
            created = next(times)
            asked = created + rng.choice([0, 0, 0, rng.randint(60, DAY)])
            told = created + rng.choice([0, 0, rng.randint(1, 7200)])   # planned later: told later
            eta = waits_from(told, asked) + rng.choice([0, 30, rng.randint(60, 2 * DAY)])
            kind = rng.choices(KINDS, weights)[0]
            # its project's load class when it started: mostly one class (so that its window binds),
            # whose leases are later (so that a project in it now is told more than its own or everyone's)
            load = rng.choices(range(5), [10, 10, 10, 60, 10])[0]
            late = rng.choice([0, 0, rng.randint(1, 600), rng.randint(600, 3 * DAY), -rng.randint(1, 3600)])
            late = late * 4 if load == 3 and late > 0 else late
            start = max(eta + late + k % 7, told)   # never before the tell
            if rng.random() < 0.1:
                start = waits_from(told, asked)   # did not wait
            if start > now - 60:
                kind = "waiting"
            leases.append({"id": f"{project}-{k:04d}", "project": project, "created": created, "asked": asked,
                           "told": told, "eta": eta, "start": start, "kind": kind, "load": load})
    return leases


# each project's load class now (held_now below: "big" and "small" hold 8 A100s each, 5x a quarter
# of their fair part); "nobody" has no quota, so no class: everyone's ratio, not raised
LOADS_NOW = {"big": 3, "mid": 0, "small": 3, "nobody": None}


def model_ratios(leases: list[dict], now: int) -> dict[str, float]:
    """What the model says at `now`: each lease told when its wait began, started in time order
    (its first start only, in its load class then), those cancelled forgotten; each project's
    ratio in its class now."""
    model = StartBy()
    for x in sorted(leases, key=lambda x: waits_from(x["told"], x["asked"])):
        model.tell(x["project"], x["id"], waits_from(x["told"], x["asked"]), x["eta"])
    for x in sorted(leases, key=lambda x: (x["start"], x["id"])):
        if x["kind"] in ("started", "again"):
            model.started(x["id"], x["start"], x["load"])
        elif x["kind"] == "cancelled":
            model.forget(x["id"])
    return {project: model.margin_ratio(project, now, LOADS_NOW[project]) for project in [*PROJECTS, "nobody"]}


def held_now(session, now: int) -> None:
    """Quotas of weight 1 on the A100s for the three projects (five with the demo's two, 32 GPUs:
    a fair part of 6.4 each) and 8 A100s held by "big" and by "small" now."""
    session.add_all(m.Quota(project_id=p, gpu_model="A100", gpus=8, weight=1.0, updated_at=utcnow_naive(now))
                    for p in PROJECTS)
    for project, host in (("big", "gpu-a100-1"), ("small", "gpu-a100-2")):
        session.add(m.Lease(id=f"{project}-holder", name=f"{project}-holder", project_id=project, user_id="u",
                            status="active", shape="a100.x8", gpu_model="A100", gpus_per_vm=8, instances=1,
                            duration=7200, earliest_start=utcnow_naive(now - 3600), start_at=utcnow_naive(now - 3600),
                            end_at=utcnow_naive(now + 3600), queue_reasons=[], created_at=utcnow_naive(now - 3600),
                            updated_at=utcnow_naive(now - 3600)))
        session.flush()
        session.add(m.Allocation(lease_id=f"{project}-holder", project_id=project, vm_index=0, host=host,
                                 gpu_model="A100", gpus=8, start_at=utcnow_naive(now - 3600),
                                 end_at=utcnow_naive(now + 3600)))


def add(session, leases: list[dict]) -> None:
    """The leases as the service would have them: told (first ETA, eta_told_at), and each start
    recorded by the ledger's own record_start, in time order (a lease queued again is started
    twice: its second start is no sample)."""
    rows = {}
    for x in leases:
        rows[x["id"]] = row = m.Lease(
            id=x["id"], name=x["id"], project_id=x["project"], user_id="u", status="queued", shape="a100.x1",
            gpu_model="A100", gpus_per_vm=1, instances=1, duration=3600, earliest_start=utcnow_naive(x["asked"]),
            first_eta=utcnow_naive(x["eta"]), eta_told_at=utcnow_naive(x["told"]), queue_reasons=[],
            created_at=utcnow_naive(x["created"]), updated_at=utcnow_naive(x["created"]))
        session.add(row)
    for x in sorted(leases, key=lambda x: (x["start"], x["id"])):
        row = rows[x["id"]]
        if x["kind"] in ("started", "again"):
            start_by_margins.record_start(session, row, x["start"], x.get("load"))
            row.start_at, row.status = utcnow_naive(x["start"]), "active"
        if x["kind"] == "again":   # its host failed: queued again, then started again
            row.status = "queued"
            start_by_margins.record_start(session, row, x["start"] + 600, x.get("load"))
            row.status = "queued"
        if x["kind"] == "cancelled":
            row.status = "cancelled"


@pytest.mark.parametrize("seed", range(10))
def test_the_margins_kept_are_the_models(sessions, clock, seed):
    """Seeded histories: the ratio refresh() keeps for each project, and everyone's, is the one
    StartBy computes from the same leases (its last 100 that waited and started, its overdue ones,
    everyone's while it has fewer than 30, raised to its load class's), and only each project's
    last 100 samples and each class's last 400 are kept."""
    rng, now = random.Random(seed), clock.now()
    leases = history(rng, now, burst=seed % 2 == 0)
    with session_scope(sessions) as session:
        add(session, leases)
        held_now(session, now)
    with session_scope(sessions) as session:
        start_by_margins.refresh(session, now)
    with session_scope(sessions) as session:
        kept = start_by_margins.read(session)
        per_project = {project: n for project, n in session.execute(
            select(m.StartBySample.project_id, func.count()).group_by(m.StartBySample.project_id))}
    expected = model_ratios(leases, now)
    assert {p: start_by_margins.basis_of(kept, p).ratio for p in expected} == expected
    sampled = sum(x["kind"] in ("started", "again") and x["start"] > waits_from(x["told"], x["asked"])
                  for x in leases if x["project"] == "big")
    kept_of_big = [load for load, in session_rows(sessions, "big")]
    # pruned: big's last 100, and its older ones of a class whose last 400 they are among
    assert per_project["big"] >= min(WINDOW, sampled) and (sampled > WINDOW or seed % 2 == 0)
    assert len(kept_of_big) == per_project["big"] and (per_project["big"] > WINDOW) == (sampled > WINDOW)
    assert expected["big"] > 0   # the seeds do make late leases
    unraised = StartBy()   # "small" is told at least everyone's (its own are too few), raised to its class's
    for x in sorted(leases, key=lambda x: (x["start"], x["id"])):
        if x["kind"] in ("started", "again"):
            unraised.tell(x["project"], x["id"], waits_from(x["told"], x["asked"]), x["eta"])
            unraised.started(x["id"], x["start"])
    assert expected["small"] >= unraised.margin_ratio("small", now)
    overdue = sum(x["kind"] == "waiting" and x["eta"] < now for x in leases if x["project"] == "big")
    assert overdue > WINDOW or seed % 2 == 1   # every cut taken: more than WINDOW overdue too


def test_a_waiting_lease_is_told_its_eta_plus_its_projects_margin(client, clock, engine_tick, sessions, runtime):
    """A project whose leases started late is told a start-by past the ETA, by its ratio times
    the planned wait; one with no history everyone's; on the create planned by a replan and on
    the one fitted into the plan; the lease's answer and its row agree, and later the start-by
    is told for the wait left."""
    now = clock.now()
    samples = [("ml-vision", k / 10) for k in range(60)] + [("nlp-lab", 0.0)] * 29   # nlp-lab's the latest
    with session_scope(sessions) as session:
        session.add_all(m.StartBySample(lease_id=f"old-{k}", project_id=project, ratio=ratio,
                                        started_at=utcnow_naive(now - DAY + k * 60))
                        for k, (project, ratio) in enumerate(samples))
    engine_tick()   # the margins computed
    with session_scope(sessions) as session:
        ratios = start_by_margins.read(session)
    # the 57th of ml-vision's 60, the 85th of the last 89 (nlp-lab has fewer than 30: everyone's)
    assert ratios["ml-vision"] == MarginBasis(5.6, FROM_PROJECT, 60, 0)
    assert ratios["nlp-lab"] == MarginBasis(5.5, FROM_EVERYONE, 89, 0)
    assert ratios[start_by_margins.EVERYONE] == MarginBasis(5.5, FROM_EVERYONE, 89)
    own, everyone = ratios["ml-vision"].ratio, ratios["nlp-lab"].ratio

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
        # and why: whose leases the margin was learnt from, in the answer and on a read
        assert lease["queue"]["start_by_basis"] == {
            "ml-vision": {"source": "project", "quantile": 0.95, "samples": 60, "ratio": 5.6, "load_class": 0,
                          "held_over_fair_share": {"from": 0.0, "below": 0.25},
                          "message": "the margin is learnt from this project's last 60 leases that waited, 95 % of "
                                     "which started no later than their ETA plus 5.6 times the wait they were told"},
            "nlp-lab": {"source": "everyone", "quantile": 0.95, "samples": 89, "ratio": 5.5, "load_class": 0,
                        "held_over_fair_share": {"from": 0.0, "below": 0.25},
                        "message": "this project has too few leases that waited, so the margin is learnt from "
                                   "everyone's last 89, 95 % of which started no later than their ETA plus 5.5 "
                                   "times the wait they were told"}}[project]
        assert client.get(f"/v1/leases/{lease['id']}", headers=headers(project)).get_json()["lease"]["queue"][
            "start_by_basis"] == lease["queue"]["start_by_basis"]
        with session_scope(sessions) as session:
            row = session.get_one(m.Lease, lease["id"])
            assert (to_epoch(row.first_eta), to_epoch(row.first_start_by)) == (eta, start_by(now, eta, ratio))
        told.append(lease)

    # a lease asked for 2 h on: its wait is told from then (a reservation plans no wait before it)
    asked = now + 2 * 3600
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H", "start": rfc3339(asked)},
                        headers=headers())
    later = reply.get_json()["lease"]
    eta = epoch(later["queue"]["eta"])
    assert later["status"] == "queued" and eta > asked + FLOOR
    assert epoch(later["queue"]["start_by"]) == start_by(asked, eta, own) < start_by(now, eta, own)
    with session_scope(sessions) as session:
        assert to_epoch(session.get_one(m.Lease, later["id"]).first_start_by) == start_by(asked, eta, own)

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
                    ["lease"]["queue"]["start_by"] for lease in [*told, later] if lease["project_id"] == "ml-vision"}
    assert [e["start_by"] for e in entries if e["hidden"]] == [None]
    # the dashboard's queue shows it beside the ETA
    login(client)
    listing = client.get("/dashboard/leases").text
    shown = client.get(f"/v1/leases/{told[0]['id']}", headers=headers()).get_json()["lease"]["queue"]
    assert shown["start_by"] != shown["eta"] and f'start by <time datetime="{shown["start_by"]}">' in listing
    assert f'start by <time datetime="{shown["start_by"]}">' in client.get("/dashboard/queue").text


def test_a_project_over_its_share_is_told_its_load_classes_margin_and_a_start_is_sampled_in_its_class(
        client, clock, engine_tick, sessions):
    """ml-vision's own leases all started on time (margin 0), but it now holds its whole fair part
    (16 of the 32 A100s, weights 1 and 1: class 3), where nlp-lab's leases started late: its new
    lease is told class 3's margin, not its own. When that lease starts, its sample is kept in
    the class ml-vision is in then (8 GPUs held: class 2)."""
    now = clock.now()
    with session_scope(sessions) as session:
        session.add_all(m.StartBySample(lease_id=f"late-{k}", project_id="nlp-lab", ratio=k / 10, load_class=3,
                                        started_at=utcnow_naive(now - DAY + k * 60)) for k in range(60))
        session.add_all(m.StartBySample(lease_id=f"on-time-{k}", project_id="ml-vision", ratio=0.0, load_class=0,
                                        started_at=utcnow_naive(now - DAY + k * 60)) for k in range(40))
    first = [ask(client, "ml-vision", "PT1H"), ask(client, "ml-vision", "PT3H"),
             ask(client, "nlp-lab", "PT3H"), ask(client, "nlp-lab", "PT3H")]
    engine_tick()
    engine_tick(advance=60)   # all four running; the margins computed with them held
    with session_scope(sessions) as session:
        assert start_by_margins.loads_now(session, clock.now()) == {"ml-vision": 3, "nlp-lab": 3}
        ratios = start_by_margins.read(session)
    with session_scope(sessions) as session:
        # a drained and a down host take no lease, so the fair part shrinks to 8 (class 4) both
        # where a start is sampled (the ledger's inputs) and where the margin is raised (the refresh)
        hosts = session.scalars(select(m.Host).where(m.Host.gpu_model == "A100").order_by(m.Host.name)).all()
        hosts[0].drained, hosts[1].up = True, False
        session.flush()
        inputs = ledger.load_inputs(session, clock.now(), PlannerSettings())
        assert start_by_margins.loads_now(session, clock.now()) == inputs.load_classes(clock.now()) == {
            "ml-vision": 4, "nlp-lab": 4}
        session.rollback()
    # class 3's 90th percentile (nlp-lab's 60: the 54th) for ml-vision, whose own is 0; nlp-lab
    # keeps its own 95th percentile (the 57th), higher
    assert ratios["ml-vision"] == MarginBasis(5.3, FROM_LOAD_CLASS, 60, 3)
    assert ratios["nlp-lab"] == MarginBasis(5.6, FROM_PROJECT, 60, 3)
    waiting = ask(client, "ml-vision", "PT1H")
    assert waiting["status"] == "queued"
    eta = epoch(waiting["queue"]["eta"])
    assert epoch(waiting["queue"]["start_by"]) == start_by(clock.now(), eta, 5.3) > eta
    basis = waiting["queue"]["start_by_basis"]
    assert (basis["source"], basis["quantile"], basis["samples"], basis["load_class"]) == ("load_class", 0.9, 60, 3)
    assert basis["held_over_fair_share"] == {"from": 1.0, "below": 2.0}
    assert basis["message"].startswith("this project held 1 to 2 times its fair share of the GPUs (load class 3)")
    login(client)   # the dashboard tells it beside the start-by
    assert f'Why that late: {escape(basis["message"])}' in client.get(f"/dashboard/leases/{waiting['id']}").text
    engine_tick(advance=eta - clock.now())
    for _ in range(3):
        engine_tick(advance=30)
    with session_scope(sessions) as session:
        assert session.get_one(m.Lease, first[0]["id"]).status == "ended"
        assert session.get_one(m.Lease, waiting["id"]).status in ("provisioning", "active")
        sample = session.get_one(m.StartBySample, waiting["id"])
        assert sample.load_class == 2   # ml-vision held 8 (its second lease) when it started


def ask(client, project: str, duration: str) -> dict:
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": duration}, headers=headers(project))
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


def test_no_history_tells_the_eta_and_old_samples_go(sessions, clock):
    """No lease has started: everyone's ratio is 0 (the start-by is the ETA); a lease that started
    without waiting leaves no sample; one older than HORIZON is dropped."""
    now = clock.now()
    with session_scope(sessions) as session:
        assert start_by_margins.refresh(session, now) == {start_by_margins.EVERYONE: MarginBasis(0.0, FROM_EVERYONE, 0)}
        add(session, [{"id": "at-once", "project": "p", "created": now - 7200, "asked": now - 7200,
                       "told": now - 7200, "eta": now - 7200, "start": now - 7200, "kind": "started"},
                      {"id": "old", "project": "p", "created": now - 40 * DAY, "asked": now - 40 * DAY,
                       "told": now - 40 * DAY, "eta": now - 40 * DAY + 60, "start": now - 39 * DAY,
                       "kind": "started"}])
    with session_scope(sessions) as session:
        assert session.scalars(select(m.StartBySample.lease_id)).all() == ["old"]
        assert start_by_margins.refresh(session, now) == {start_by_margins.EVERYONE: MarginBasis(0.0, FROM_EVERYONE, 0)}
        assert session.scalars(select(m.StartBySample.lease_id)).all() == []
        assert session.scalars(select(m.StartByMargin.project_id)).all() == [start_by_margins.EVERYONE]


def session_rows(sessions, project: str) -> list:
    with session_scope(sessions) as session:
        return list(session.execute(select(m.StartBySample.load_class).where(m.StartBySample.project_id == project)))


def epoch(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def test_a_margin_computed_before_its_basis_was_kept_tells_the_start_by_without_a_why(client, sessions, clock,
                                                                                       runtime):
    """Margin rows from before migration 0027 have no source: a lease told their ratio (by the
    replan and by the fit) gets its start-by from it, and no basis (SQL NULL), until the next refresh."""
    with session_scope(sessions) as session:
        session.execute(delete(m.StartByMargin))
        session.add(m.StartByMargin(project_id="ml-vision", ratio=2.0, samples=50,
                                    computed_at=utcnow_naive(clock.now())))
    for project in ("ml-vision", "ml-vision", "nlp-lab", "nlp-lab"):   # the 32 A100s taken
        assert ask(client, project, "PT3H")["status"] == "scheduled"
    waiting = [ask(client, "ml-vision", "PT1H")]
    runtime.fits.min_waiting = 0   # the next one fitted into the plan
    waiting.append(ask(client, "ml-vision", "PT1H"))
    for lease in waiting:
        assert lease["status"] == "queued" and lease["queue"]["start_by"] != lease["queue"]["eta"]
        assert lease["queue"]["start_by_basis"] is None
        with session_scope(sessions) as session:
            assert session.scalar(select(func.count()).select_from(m.Lease).where(
                m.Lease.id == lease["id"], m.Lease.start_by_basis.is_(None), m.Lease.start_by_ratio == 2.0)) == 1

"""What keeps the lease API fast under load (bench/api_load.py measures it): a new
lease is committed first and planned after, under the ledger lock, by one replan
for every request waiting there; a page of leases costs the same few statements
whatever its size. On the test database (SQLite, or PostgreSQL with GPU_TENANCY_TEST_DB)."""
from __future__ import annotations

import gc
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import OperationalError

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.failures import FailureClass
from gpu_tenancy.domain.lease_ask import LeaseAsk
from gpu_tenancy.engine import leases, ledger, new_lease
from gpu_tenancy.engine.leases import Caller
from tests.conftest import headers
from tests.functional.test_metrics import scrape, value

CREATES = 8
SHAPES = ["a100.x8", "a100.x4", "a100.x2", "a100.x1"]


def replans(client) -> tuple[float, float, float]:
    """(creates that replanned, creates whose lease another replan planned, replans of any kind)."""
    samples = scrape(client)
    return (value(samples, "gpu_tenancy_lease_create_replans_total", outcome="replanned"),
            value(samples, "gpu_tenancy_lease_create_replans_total", outcome="shared"),
            value(samples, "gpu_tenancy_planner_duration_seconds_count"))


def planned(lease: dict) -> bool:
    """Scheduled with its GPUs, or queued with the planner's word on it."""
    if lease["status"] == "scheduled":
        return bool(lease["allocations"])
    return lease["status"] == "queued" and lease["queue"]["position"] is not None and lease["queue"]["reasons"]


def test_creates_waiting_together_are_planned_by_one_replan(app, client, monkeypatch):
    """Eight creates commit their leases, then all ask for planning at once (a barrier
    holds them between the two transactions): the first to hold the ledger lock
    replans for all eight, the seven others find their lease planned and only read it."""
    together = threading.Barrier(CREATES, timeout=60)
    plan_created = new_lease.plan_created

    def after_every_commit(*args):
        together.wait()
        return plan_created(*args)

    monkeypatch.setattr(new_lease, "plan_created", after_every_commit)
    before = replans(client)

    def create(k: int) -> tuple[int, dict]:
        reply = app.test_client().post("/v1/leases", json={"shape": SHAPES[k % 4], "duration": "PT2H"},
                                       headers=headers(["ml-vision", "nlp-lab"][k % 2]))
        return reply.status_code, reply.get_json()

    with ThreadPoolExecutor(CREATES) as pool:
        answers = list(pool.map(create, range(CREATES)))
    assert [code for code, _ in answers] == [201] * CREATES, answers
    assert all(planned(body["lease"]) for _, body in answers), answers
    replanned, shared, total = (b - a for a, b in zip(before, replans(client)))
    assert (replanned, shared, total) == (1, CREATES - 1, 1)
    # the answer is what is stored, and the audit record tells the same
    records = client.get("/v1/audit?action=lease.create", headers=headers(roles="admin")).get_json()
    after = {r["target_id"]: r["after"] for r in records["audit_records"]}
    for _, body in answers:
        shown = client.get(f"/v1/leases/{body['lease']['id']}", headers=headers(body["lease"]["project_id"]))
        assert shown.get_json()["lease"] == body["lease"] == after[body["lease"]["id"]]


def test_concurrent_creates_are_each_planned_and_never_overcommit(app, client, runtime):
    """Without a barrier: 24 creates from 8 threads for the 32 A100 GPUs; every lease is
    planned, no host holds more than its GPUs, and there are never more replans than creates."""
    before = replans(client)

    def create(k: int) -> dict:
        reply = app.test_client().post("/v1/leases", json={"shape": SHAPES[k % 4], "duration": "PT2H"},
                                       headers=headers(["ml-vision", "nlp-lab"][k % 2]))
        assert reply.status_code == 201, reply.get_json()
        return reply.get_json()["lease"]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(create, range(24)))
    assert all(planned(lease) for lease in answers)
    replanned, shared, total = (b - a for a, b in zip(before, replans(client)))
    assert replanned + shared == 24 and total == replanned <= 24
    with session_scope(runtime.sessions) as session:
        per_host: dict[str, int] = {}
        for alloc in session.scalars(select(m.Allocation)):
            per_host[alloc.host] = per_host.get(alloc.host, 0) + alloc.gpus   # all start now, for 2 h
        capacity = {h.name: h.gpus for h in session.scalars(select(m.Host))}
    assert per_host and all(gpus <= capacity[host] for host, gpus in per_host.items())


def test_a_lease_planned_by_a_later_replan_is_only_read(client, runtime):
    """plan_new replans only when no replan has seen the lease since its commit."""
    now, settings = runtime.clock.now(), runtime.planner_settings
    caller = Caller("u", "ml-vision")

    def committed() -> str:
        with session_scope(runtime.sessions) as session:
            return leases.create(session, now, runtime.limits, caller, LeaseAsk("a100.x8", 3600)).id

    first = committed()
    before = replans(client)
    with session_scope(runtime.sessions) as session:       # another request's replan, after the commit
        ledger.replan(session, now, settings)
    with session_scope(runtime.sessions) as session:
        assert ledger.plan_new(session, lambda: now, settings, first).status == "scheduled"
    assert tuple(b - a for a, b in zip(before, replans(client))) == (0, 1, 1)   # one replan, the other's

    second = committed()
    with session_scope(runtime.sessions) as session:
        assert ledger.plan_new(session, lambda: now, settings, second).status == "scheduled"
    assert tuple(b - a for a, b in zip(before, replans(client))) == (1, 1, 2)


def test_a_create_whose_queued_lease_another_replan_has_positioned_does_not_replan(client, runtime, monkeypatch):
    """The cluster is full, so the new lease stays queued: a replan run by another
    request after its commit gives it a position, and the create then only reads it
    (outcome shared), and answers with that position, ETA and reasons."""
    now, settings = runtime.clock.now(), runtime.planner_settings
    for project in ("ml-vision", "ml-vision", "nlp-lab", "nlp-lab"):   # the demo cloud's 32 A100, all taken
        assert client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H"},
                           headers=headers(project)).get_json()["lease"]["status"] == "scheduled"
    plan_created = new_lease.plan_created

    def after_another_replan(transaction, clock, config, settings_, lease_id, record_id, render):
        with session_scope(runtime.sessions) as session:
            ledger.replan(session, now, settings)
        with session_scope(runtime.sessions) as session:
            assert session.get(m.Lease, lease_id).queue_position is not None
        return plan_created(transaction, clock, config, settings_, lease_id, record_id, render)

    monkeypatch.setattr(new_lease, "plan_created", after_another_replan)
    before = replans(client)
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=headers())
    assert reply.status_code == 201, reply.get_json()
    lease = reply.get_json()["lease"]
    assert lease["status"] == "queued" and planned(lease) and lease["queue"]["eta"] == "2026-12-01T10:00:05Z"
    assert tuple(b - a for a, b in zip(before, replans(client))) == (0, 1, 1)   # the other's replan only
    assert client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"] == lease


def test_a_lease_whose_planning_fails_is_still_answered_and_the_engine_plans_it(client, engine_tick, monkeypatch):
    """The lease and its audit record are committed before planning: if planning fails
    (the database went away, say), the answer tells the lease as committed, queued and
    not yet planned, and the engine's next replan plans it."""
    def broken(*args, **kwargs):
        raise OperationalError("SELECT ...", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(ledger, "replan_locked", broken)
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=headers())
    assert reply.status_code == 201, reply.get_json()
    lease = reply.get_json()["lease"]
    assert lease["status"] == "queued" and lease["queue"] == {"position": None, "eta": None, "start_by": None,
                                                    "start_by_basis": None, "reasons": []}
    record = client.get("/v1/audit?action=lease.create", headers=headers(roles="admin")).get_json()
    assert record["audit_records"][0]["after"] == lease
    monkeypatch.undo()
    engine_tick()
    shown = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert shown["status"] in ("scheduled", "provisioning") and shown["allocations"]


@pytest.fixture
def statements(runtime):
    """Counts the SQL statements sent while the `with` block runs."""
    engine = runtime.sessions.kw["bind"]
    sent: list[str] = []

    def count(conn, cursor, statement, *args):
        sent.append(statement)
    event.listen(engine, "before_cursor_execute", count)
    yield sent
    event.remove(engine, "before_cursor_execute", count)


def test_a_page_of_leases_costs_the_same_few_statements_whatever_its_size(client, engine_tick, cloud, statements):
    """Leases with allocations, servers and a failure each: no statement per lease."""
    cloud.inject_failure("boot", FailureClass.HOST_DOWN)        # one boot fails and is retried elsewhere
    for k in range(12):
        shape = "a100.x2" if k < 8 else "a100.x8"
        assert client.post("/v1/leases", json={"shape": shape, "duration": "PT4H"},
                           headers=headers()).status_code == 201
    engine_tick()
    engine_tick(advance=60)
    engine_tick(advance=60)
    page = client.get("/v1/leases?limit=12", headers=headers()).get_json()["leases"]
    assert any(lease["servers"] for lease in page) and any(lease["failures"] for lease in page)
    assert any(lease["status"] == "queued" for lease in page)
    sent = []
    for limit in (1, 4, 12):
        statements.clear()
        reply = client.get(f"/v1/leases?limit={limit}", headers=headers())
        assert len(reply.get_json()["leases"]) == limit
        sent.append([s for s in statements if not s.startswith("BEGIN")])   # SQLite's BEGIN IMMEDIATE
    # the page, then its allocations, servers and failures; none reads what the answer never shows
    assert [len(s) for s in sent] == [4, 4, 4], sent
    assert not any("user_data" in s or "readiness_token" in s for s in sent[0]), sent[0]


@pytest.fixture
def config(db_url):
    """With a readiness URL, so that leases can ask for the readiness probe."""
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779")


def test_a_listed_lease_is_what_its_own_page_shows(client, engine_tick, cloud):
    """The listing reads plain columns, the lease's own page an ORM row: both render
    the same answer, for leases with allocations, servers, failures, readiness
    reports, a volume and a latest start, and for queued ones."""
    def create(**extra) -> dict:
        reply = client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT4H", **extra}, headers=headers())
        assert reply.status_code == 201, reply.get_json()
        return reply.get_json()["lease"]

    cloud.inject_failure("boot", FailureClass.HOST_DOWN)        # one boot fails and is retried elsewhere
    probed = [create(readiness_probe=True, instances=2), create(readiness_probe=True), create(readiness_probe=True)]
    for advance in (0, 60, 60, 60):
        engine_tick(advance=advance)
    active = [lease for lease in probed if client.get(f"/v1/leases/{lease['id']}", headers=headers())
              .get_json()["lease"]["status"] == "active"]
    assert len(active) >= 2, active
    for lease, ok in zip(active, (True, False)):
        for instance in range(lease["instances"]):
            reply = client.post(f"/v1/leases/{lease['id']}/readiness", json={"instance": instance, "ok": ok},
                                headers={"X-Lease-Token": lease["readiness"]["token"]})
            assert reply.status_code == 200, reply.get_json()
    made = probed + [create(volume={"size_gb": 10}, latest_start="2026-12-02T08:00:00Z"),
                     create(name="named", key_name="k")] + [create(shape="a100.x8") for _ in range(3)]
    engine_tick()
    listed = client.get("/v1/leases?limit=20", headers=headers()).get_json()["leases"]
    assert sorted(lease["id"] for lease in listed) == sorted(lease["id"] for lease in made)
    assert {lease["readiness"]["status"] for lease in listed if lease["readiness"]} >= {"ready", "failed"}
    assert any(lease["failures"] for lease in listed) and any(lease["status"] == "queued" for lease in listed)
    assert any(lease["volume"] for lease in listed) and any(lease["latest_start"] for lease in listed)
    assert any(lease["allocations"] for lease in listed) and any(lease["servers"] for lease in listed)
    for lease in listed:
        assert lease == client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    # every project's (an admin's listing), and by status: the children are read the other ways
    everyone = client.get("/v1/leases?all_projects=true&limit=20", headers=headers(roles="admin")).get_json()
    as_operator = client.get("/v1/leases?limit=20", headers=headers(roles="admin")).get_json()["leases"]
    assert [lease["id"] for lease in as_operator] == [lease["id"] for lease in listed]
    assert everyone["leases"] == as_operator   # an operator sees the cloud's words in failures, the project not
    by_status = client.get("/v1/leases?status=active&status=queued&limit=20", headers=headers()).get_json()
    assert by_status["leases"] == [lease for lease in listed if lease["status"] in ("active", "queued")]
    assert any(lease["servers"] for lease in by_status["leases"])


def test_a_replan_runs_with_the_collector_paused_and_leaves_it_on(client, runtime, monkeypatch):
    """engine/gc_pause.py: a full collection walks every row a replan loaded, again and again."""
    seen = []
    planning = ledger.run_planner

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return planning(*args, **kwargs)
    monkeypatch.setattr(ledger, "run_planner", watched)
    client.post("/v1/leases", json={"shape": "a100.x8", "duration": 3600}, headers=headers())
    with session_scope(runtime.sessions) as session:
        ledger.replan(session, runtime.clock.now(), runtime.planner_settings)
    assert seen and not any(seen)
    assert gc.isenabled()

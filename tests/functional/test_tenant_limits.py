"""The limits no tenant can pass, whatever its quota (issue 15): a lease's duration and
how far ahead it starts, the leases it may keep waiting; and a lease beyond any
plannable time, already in the database, stops nobody else's leases."""
from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from sqlalchemy import event, func, select

from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.demo.seed import seed
from gpu_tenancy.engine import ask_facts
from gpu_tenancy.engine.events import record_transition
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import PG_URL, T0, headers
from tests.races import Held, race

ADMIN = headers("admin-project", "admin", "olga")
DAY = 86400


def unlimited_quota(client, project="ml-vision"):
    """A100 quota without a max_duration (the default), as in the issue."""
    reply = client.put(f"/v1/quotas/{project}", headers=ADMIN,
                       json={"quota": {"gpu_models": {"A100": {"gpus": 16}}}})
    assert reply.status_code == 200, reply.get_json()


def error(reply, status):
    assert reply.status_code == status, reply.get_data(as_text=True)[:500]
    [err] = reply.get_json()["errors"]
    return err


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("duration", ["P3000000D", "P91D", 91 * DAY, "P9999999999D"])
def test_a_duration_over_the_service_maximum_is_a_400_that_says_the_limit(client, dry_run, duration):
    unlimited_quota(client)
    reply = client.post("/v1/leases", query_string={"dry_run": str(dry_run).lower()}, headers=headers(),
                        json={"shape": "a100.x1", "duration": duration})
    err = error(reply, 400)
    assert err["code"] in ("gpu_tenancy.over_service_max_duration", "gpu_tenancy.bad_duration")
    if duration != "P9999999999D":     # that one is longer than any time can count
        assert err["code"] == "gpu_tenancy.over_service_max_duration" and "90 days" in err["detail"]
    listed = client.get("/v1/leases", headers=headers()).get_json()["leases"]
    assert listed == []


def test_the_service_maximum_comes_before_the_quota(client):
    """A project without any quota hears of the service's limit, not of its quota."""
    reply = client.post("/v1/leases", headers=headers("no-quota-project"),
                        json={"shape": "a100.x1", "duration": "P100D"})
    assert error(reply, 400)["code"] == "gpu_tenancy.over_service_max_duration"


def test_a_patch_past_the_service_maximum_is_refused(client):
    unlimited_quota(client)
    lease = client.post("/v1/leases", headers=headers(), json={"shape": "a100.x1", "duration": "P10D"})
    lease_id = lease.get_json()["lease"]["id"]
    for body in ({"duration": "P3000000D"}, {"end": "9998-12-01T00:00:00Z"}):
        err = error(client.patch(f"/v1/leases/{lease_id}", json=body, headers=headers()), 400)
        assert err["code"] == "gpu_tenancy.over_service_max_duration" and "90 days" in err["detail"]
    assert client.patch(f"/v1/leases/{lease_id}", json={"duration": "P90D"}, headers=headers()).status_code == 200


def test_a_shrink_is_not_refused_by_a_limit_lowered_since(client, runtime, engine_tick):
    """An admin lowers the quota's max_duration (and the service's) below a running lease's: the
    lease may not be extended, but its tenant may still shorten it to give the GPUs back sooner."""
    lease = client.post("/v1/leases", headers=headers(), json={"shape": "a100.x8", "duration": "P5D"})
    lease_id = lease.get_json()["lease"]["id"]
    engine_tick()
    engine_tick(advance=60)
    assert client.put("/v1/quotas/ml-vision", headers=ADMIN, json={"quota": {"gpu_models": {
        "A100": {"gpus": 16, "max_duration": "P1D"}}}}).status_code == 200
    err = error(client.patch(f"/v1/leases/{lease_id}", json={"duration": "P6D"}, headers=headers()), 400)
    assert err["code"] == "gpu_tenancy.over_max_duration"
    shrunk = client.patch(f"/v1/leases/{lease_id}", json={"duration": "P3D", "shrink": True}, headers=headers())
    assert shrunk.status_code == 200, shrunk.get_json()
    assert shrunk.get_json()["lease"]["end"] == rfc3339(T0 + 3 * DAY)
    runtime.limits = replace(runtime.limits, max_duration=2 * DAY)
    shrunk = client.patch(f"/v1/leases/{lease_id}", json={"duration": "P2DT12H", "shrink": True}, headers=headers())
    assert shrunk.status_code == 200, shrunk.get_json()


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("field, at", [("start", "9998-12-31T00:00:00Z"), ("start", rfc3339(T0 + 366 * DAY)),
                                       ("latest_start", rfc3339(T0 + 400 * DAY))])
def test_a_start_too_far_ahead_is_a_400_that_says_the_limit(client, dry_run, field, at):
    unlimited_quota(client)
    body = {"shape": "a100.x1", "duration": 2 * 365 * DAY if field == "start" else "PT1H", field: at}
    reply = client.post("/v1/leases", query_string={"dry_run": str(dry_run).lower()}, headers=headers(), json=body)
    err = error(reply, 400)
    # a 2-year duration is over the maximum too; the start is checked first
    assert err["code"] == "gpu_tenancy.start_too_far" and "365 days" in err["detail"] and field in err["detail"]


def test_a_start_within_the_year_is_taken(client):
    unlimited_quota(client)
    reply = client.post("/v1/leases", headers=headers(),
                        json={"shape": "a100.x1", "duration": "P90D", "start": rfc3339(T0 + 364 * DAY)})
    assert reply.status_code == 201, reply.get_json()


@pytest.fixture
def app_with(db_url, clock, cloud):
    """An app with the demo catalog and the configuration options given."""
    made = []

    def make(**options):
        config = Config.load(database_url=db_url, auth_strategy="noauth2", **options)
        app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
        runtime = app.extensions["gpu_tenancy"]
        with session_scope(runtime.sessions) as session:
            seed(session, clock.now(), cloud.images())
        runtime.engine.lifecycle.refresh_hosts()
        made.append(runtime)
        return app
    yield make
    for runtime in made:
        runtime.sessions.kw["bind"].dispose()


def test_the_limits_are_configurable(app_with):
    client = app_with(max_lease_duration_days=200, max_start_ahead_days=10).test_client()
    unlimited_quota(client)
    assert client.post("/v1/leases", headers=headers(), json={"shape": "a100.x1", "duration": "P150D"}) \
        .status_code == 201
    err = error(client.post("/v1/leases", headers=headers(), json={
        "shape": "a100.x1", "duration": "PT1H", "start": rfc3339(T0 + 11 * DAY)}), 400)
    assert "10 days" in err["detail"]


@pytest.mark.parametrize("value", [0, -1, 3651, "90", True, 1.5])
def test_a_limit_out_of_range_is_a_configuration_error(db_url, value):
    """Durations are stored in seconds in a 32-bit integer column: at most 10 years fit."""
    with pytest.raises(ValueError, match="max_lease_duration_days must be a whole number from 1 to 3650"):
        Config.load(database_url=db_url, max_lease_duration_days=value)


def insert_queued(sessions, project: str, duration: int, start: int = T0) -> str:
    """A queued lease written straight into the database (as before the limits, or by hand)."""
    with session_scope(sessions) as session:
        stamp = utcnow_naive(T0)
        row = m.Lease(id="bad00000-0000-0000-0000-000000000000", project_id=project, user_id=f"{project}-user",
                      status=None, gpu_model="A100", gpus_per_vm=1, instances=1, duration=duration,
                      earliest_start=utcnow_naive(start), priority=0, created_at=stamp, updated_at=stamp,
                      queue_reasons=[], name="bad", shape="a100.x1", image="ubuntu-22.04-cuda-12",
                      preemptible=False, readiness_probe=False)
        session.add(row)
        record_transition(session, row, LeaseState.REQUESTED, T0, "test", "asked for")
        record_transition(session, row, LeaseState.QUEUED, T0, "test", "waiting")
        return row.id


@pytest.mark.parametrize("duration, start", [(3_000_000 * DAY, T0), (65 * 365 * DAY, T0),
                                             (2 * 365 * DAY, 253_370_678_400)])
def test_a_lease_beyond_any_plannable_time_in_the_database_stops_nobody(client, runtime, engine_tick, sessions,
                                                                        duration, start):
    """A 3,000,000-day lease, a 65-year one, or one from 9998-12-31 for two years, is already queued: the
    engine fails it with its reason, and plans, changes and cancels the others as before."""
    if PG_URL and duration > 2**31 - 1:
        pytest.skip("PostgreSQL's INTEGER column cannot hold it: the row cannot exist there")
    other = client.post("/v1/leases", headers=headers("nlp-lab"),
                        json={"shape": "a100.x1", "duration": "PT2H", "start": rfc3339(T0 + 3600)})
    assert other.status_code == 201
    other_id = other.get_json()["lease"]["id"]
    bad = insert_queued(sessions, "ml-vision", duration, start)
    engine_tick()
    shown = client.get(f"/v1/leases/{bad}", headers=headers()).get_json()["lease"]
    assert shown["status"] == "failed" and "cannot be planned" in shown["failure"]["message"]
    events = client.get(f"/v1/leases/{bad}/events", headers=headers()).get_json()["events"]
    assert events[-1]["to"] == "failed" and "cannot be planned" in events[-1]["message"]
    # another tenant's new lease is planned, its change and cancel answer as ever
    fresh = client.post("/v1/leases", headers=headers("nlp-lab"), json={"shape": "a100.x1", "duration": "PT1H"})
    assert fresh.status_code == 201 and fresh.get_json()["lease"]["status"] == "scheduled"
    assert client.patch(f"/v1/leases/{other_id}", json={"duration": "PT3H"}, headers=headers("nlp-lab")) \
        .status_code == 200
    assert client.delete(f"/v1/leases/{other_id}", headers=headers("nlp-lab")).status_code == 204
    engine_tick()
    engine_tick(advance=30)
    assert client.get(f"/v1/leases/{fresh.get_json()['lease']['id']}",
                      headers=headers("nlp-lab")).get_json()["lease"]["status"] == "active"


def test_a_bad_lease_queued_between_ticks_does_not_fail_an_api_replan(client, sessions):
    """The API's own replans (a create, a cancel) pass the guard too, not only the engine's."""
    other = client.post("/v1/leases", headers=headers("nlp-lab"),
                        json={"shape": "a100.x1", "duration": "PT2H", "start": rfc3339(T0 + 3600)})
    bad = insert_queued(sessions, "ml-vision", 2 * 365 * DAY, 253_370_678_400)   # from 9998-12-31
    assert client.delete(f"/v1/leases/{other.get_json()['lease']['id']}",
                         headers=headers("nlp-lab")).status_code == 204
    with session_scope(sessions) as session:
        assert session.get(m.Lease, bad).status == "failed"
        assert session.scalar(select(m.Lease.failure_class).where(m.Lease.id == bad)) == "internal"


def test_waiting_leases_are_capped_per_user_and_per_project(app_with):
    """Every waiting lease is planned again on every change: one member cannot queue
    without end. The refusal is a 403 that gives the count; a dry run hears it too."""
    client = app_with(max_waiting_leases_per_project=5, max_waiting_leases_per_user=3).test_client()
    later = rfc3339(T0 + 2 * DAY)   # a reservation waits (queued) until its start

    def ask(user, project="ml-vision", dry_run=False, instances=3):   # 24 GPUs: over the quota, they wait
        return client.post("/v1/leases", query_string={"dry_run": "true"} if dry_run else None,
                           headers=headers(project, user=user),
                           json={"shape": "a100.x8", "duration": "PT1H", "start": later, "instances": instances})

    made = [ask("ann") for _ in range(3)]
    assert [r.status_code for r in made] == [201] * 3
    assert {r.get_json()["lease"]["status"] for r in made} == {"queued"}
    for dry_run in (False, True):
        err = error(ask("ann", dry_run=dry_run), 403)
        assert err["code"] == "gpu_tenancy.too_many_waiting" and "3 leases waiting" in err["detail"]
    assert [ask("bob").status_code for _ in range(2)] == [201, 201]
    err = error(ask("cid"), 403)
    assert err["code"] == "gpu_tenancy.too_many_waiting" and "project ml-vision has 5 leases waiting" in err["detail"]
    assert ask("dan", "nlp-lab", instances=1).status_code == 201            # other projects are not held back
    client.delete(f"/v1/leases/{made[0].get_json()['lease']['id']}", headers=headers(user="ann"))
    assert ask("ann").status_code == 201                       # a cancelled lease frees its place


def test_waiting_leases_are_counted_up_to_one_past_the_limit(app_with):
    """A create counts a project's (and a user's) waiting leases only as far as its check needs
    (engine/ask_facts.py): at the limit the count is exact; past it (the limit was lowered since)
    the refusal says "more than" the limit, whatever the queue holds."""
    app = app_with(max_waiting_leases_per_project=10, max_waiting_leases_per_user=10)
    client, rt = app.test_client(), app.extensions["gpu_tenancy"]
    later = rfc3339(T0 + 2 * DAY)

    def ask(user):
        return client.post("/v1/leases", headers=headers("ml-vision", user=user),
                           json={"shape": "a100.x8", "duration": "PT1H", "start": later, "instances": 3})
    assert [ask(f"u{k % 2}").status_code for k in range(7)] == [201] * 7   # 4 of u0's, 3 of u1's
    with rt.sessions() as s:   # the counts stop one past the limits asked: 3 + 1 of 7, 2 + 1 of 4
        facts = ask_facts.read(s, "ml-vision", "u0", "a100.x8", "any", most_project=3, most_user=2)
    assert (facts.waiting_project, facts.waiting_user) == (4, 3)
    for most, told in ((7, "has 7 leases"), (6, "has more than 6 leases"), (3, "has more than 3 leases")):
        rt.limits = replace(rt.limits, waiting_per_project=most)
        err = error(ask("u9"), 403)
        assert err["code"] == "gpu_tenancy.too_many_waiting" and f"project ml-vision {told} waiting" in err["detail"]
    rt.limits = replace(rt.limits, waiting_per_project=10, waiting_per_user=4)
    assert "user u0 has 4 leases waiting" in error(ask("u0"), 403)["detail"]
    rt.limits = replace(rt.limits, waiting_per_user=2)
    assert "user u0 has more than 2 leases waiting" in error(ask("u0"), 403)["detail"]
    assert ask("u9").status_code == 201   # a user below the limit is not held back


@pytest.mark.skipif(not PG_URL, reason="on SQLite a create holds the database's write lock from its start: "
                                       "two cannot count the waiting leases at once")
@pytest.mark.parametrize("named", [False, True])
def test_two_creates_at_once_do_not_pass_the_waiting_limit_together(app_with, db_url, monkeypatch, named):
    """One place left under the project's limit, two members' creates at once: the first held
    just past its check, the second waits for the project's create lock (engine/leases.py
    create_lock), then counts the first's lease and is refused."""
    app = app_with(max_waiting_leases_per_project=2, max_waiting_leases_per_user=5)
    later = rfc3339(T0 + 2 * DAY)

    def ask(user, name=None):
        reply = app.test_client().post("/v1/leases", headers=headers(user=user), json={
            "shape": "a100.x8", "duration": "PT1H", "start": later, "instances": 3,
            **({"name": name} if name else {})})
        return reply.status_code, reply.get_json()
    assert ask("ann")[0] == 201
    rt = app.extensions["gpu_tenancy"]
    point = Held()
    monkeypatch.setattr(rt.limits.__class__, "check_waiting", point.around(rt.limits.__class__.check_waiting))
    answers = race(db_url, point, lambda: ask("bob", "b" if named else None), lambda: ask("cid", "c" if named else None))
    assert sorted(code for code, _ in answers) == [201, 403], answers
    refused = next(body for code, body in answers if code == 403)
    assert refused["errors"][0]["code"] == "gpu_tenancy.too_many_waiting"
    with session_scope(rt.sessions) as s:
        waiting = s.scalars(select(m.Lease.id).where(m.Lease.project_id == "ml-vision",
                                                     m.Lease.status.in_(ask_facts.WAITING_STATES))).all()
    assert len(waiting) == 2


def waiting_counts(session) -> tuple[Counter, Counter]:
    """The waiting leases (as the limits count them) per project and per (project, user)."""
    rows = session.execute(select(m.Lease.project_id, m.Lease.user_id, func.count()).where(
        m.Lease.status.in_(ask_facts.WAITING_STATES)).group_by(m.Lease.project_id, m.Lease.user_id)).all()
    projects: Counter = Counter()
    users: Counter = Counter()
    for project, user, n in rows:
        projects[project] += n
        users[(project, user)] = n
    return projects, users


@pytest.mark.parametrize("seed", range(2))
def test_creates_at_once_never_pass_a_waiting_limit(app_with, seed):
    """Seeded random creates (and some cancels) of four threads at once, from three projects with
    quotas and one without, of several users each, some asks bad. At every commit no project and
    no user has more leases waiting than its limit (on SQLite a create holds the write lock from
    its start; on PostgreSQL, GPU_TENANCY_TEST_DB, they interleave under the create lock); every
    refusal is a 4xx in the OpenStack error format; every lease in the database is one a 201
    answered, with its audit record: nothing half-made."""
    rng = random.Random(seed)
    per_project, per_user = rng.choice((3, 4, 5)), rng.choice((1, 2))   # four users each: both are reached
    app = app_with(max_waiting_leases_per_project=per_project, max_waiting_leases_per_user=per_user)
    rt = app.extensions["gpu_tenancy"]
    unlimited_quota(app.test_client(), "astro")
    later = rfc3339(T0 + 2 * DAY)
    over: list[str] = []

    @event.listens_for(rt.sessions, "before_commit")
    def at_commit(session):   # the commit's own transaction: what it is about to make of the counts
        projects, users = waiting_counts(session)
        over.extend(f"{p}: {n}" for p, n in projects.items() if n > per_project)
        over.extend(f"{u}: {n}" for u, n in users.items() if n > per_user)

    def tenant(worker: int) -> list[tuple]:
        r, client, answers = random.Random(f"{seed}:{worker}"), app.test_client(), []
        mine: list[tuple[dict, str]] = []
        for step in range(30):
            if mine and r.random() < 0.2:
                who, lease_id = mine.pop(r.randrange(len(mine)))
                reply = client.delete(f"/v1/leases/{lease_id}", headers=who)
                assert reply.status_code == 204, reply.get_data(as_text=True)[:500]
                continue
            project = r.choice(("ml-vision", "ml-vision", "nlp-lab", "astro", "no-quota-project"))
            who = headers(project, user=f"{project}-u{r.randrange(4)}")
            body: dict = {"shape": r.choice(("a100.x1", "a100.x8", "a100.x8")), "duration": "PT1H",
                          "instances": r.choice((1, 3))}
            if r.random() < 0.6:
                body["start"] = later   # a reservation: it waits (scheduled) until then
            if r.random() < 0.1:
                body[r.choice(("shape", "duration"))] = r.choice(("no-such", "P400D", -1))
            reply = client.post("/v1/leases", headers=who, json=body)
            answers.append((worker, step, project, reply.status_code, reply.get_json(),
                            reply.headers.get("x-openstack-request-id")))
            if reply.status_code == 201:
                mine.append((who, reply.get_json()["lease"]["id"]))
        return answers

    try:
        with ThreadPoolExecutor(4) as pool:
            answers = [a for got in pool.map(tenant, range(4)) for a in got]
    finally:
        event.remove(rt.sessions, "before_commit", at_commit)
    assert not over, f"seed {seed}, limits {per_project}/{per_user}: over at a commit: {over[:10]}"
    made = {body["lease"]["id"] for *_, status, body, _ in answers if status == 201}
    refused = Counter()
    for worker, step, _, status, body, request_id in answers:
        if status == 201:
            continue
        assert 400 <= status < 500, (seed, worker, step, status, body)
        (err,) = body["errors"]
        assert {"status", "code", "title", "detail", "request_id"} <= set(err), err
        assert err["status"] == status and err["request_id"] == request_id, err
        refused[err["code"], err["detail"].split()[0]] += 1
    # both limits were reached
    assert refused["gpu_tenancy.too_many_waiting", "project"] and refused["gpu_tenancy.too_many_waiting", "user"], refused
    with session_scope(rt.sessions) as s:
        leases = set(s.scalars(select(m.Lease.id)))
        audited = set(s.scalars(select(m.AuditRecord.target_id).where(m.AuditRecord.action == "lease.create")))
        projects, users = waiting_counts(s)
    assert leases == made and audited == made, (seed, leases ^ made, audited ^ made)
    assert max(projects.values()) <= per_project and max(users.values()) <= per_user

# A tenant's costly read (a route that plans the whole queue, or reads a long history) and the
# function that does its work inside the request's transaction: meanwhile nobody else may write.
COSTLY_READS = [
    ("GET", "/v1/share", None, "gpu_tenancy.engine.share.standings", 200),
    ("GET", "/v1/queue", None, "gpu_tenancy.engine.queue.waiting", 200),
    ("GET", f"/v1/capacity?start={rfc3339(T0)}&end={rfc3339(T0 + 90 * DAY)}", None,
     "gpu_tenancy.engine.capacity.calendar", 200),
    ("GET", "/v1/usage?start=2000-01-01T00:00:00Z", None, "gpu_tenancy.engine.usage.figures", 200),
    ("GET", "/v1/leases/{lease}/events?limit=1000", None, "gpu_tenancy.engine.events.of_lease", 200),
    ("GET", "/v1/leases?limit=1000", None, "gpu_tenancy.api.leases.page", 200),
    ("POST", "/v1/leases?dry_run=true", {"shape": "a100.x8", "duration": "PT1H"},
     "gpu_tenancy.engine.offers.preview", 200),
    ("GET", "/reservation/v1/leases", None, "gpu_tenancy.api.blazar.view.listing", 200),
    ("POST", "/reservation/v1/leases", {"name": "b", "start_date": "now", "end_date": "2026-12-02 08:00",
                                        "events": [], "reservations": [{"resource_type": "flavor:instance",
                                        "flavor_id": "a100.x8", "amount": 1, "affinity": "None"}]},
     "gpu_tenancy.api.blazar.leases.dry_run", 409),
]


@pytest.mark.skipif(bool(PG_URL), reason="SQLite's write lock (on PostgreSQL a read holds no lock)")
@pytest.mark.parametrize("method,path,body,work,status", COSTLY_READS, ids=["share", "queue", "calendar", "usage", "events", "leases", "dry-run", "blazar-list", "blazar-refused-create"])
def test_a_costly_read_holds_no_write_lock_meanwhile(client, db_url, monkeypatch, method, path, body, work,
                                                      status):
    """Every SQLite transaction that may write takes the write lock as it begins (BEGIN
    IMMEDIATE); a read-only route's did too, so a member planning the queue in a loop (a dry
    run at 1,000 waiting: 0.3-0.5 s) or listing a long history held every create, cancel and
    engine pass behind it. Another connection writes while the route does its work."""
    import importlib
    import sqlite3

    for who in ("ml-vision", "nlp-lab"):   # the cluster full: the Blazar create is refused after its plan
        made = client.post("/v1/leases", headers=headers(who),
                           json={"shape": "a100.x8", "duration": "PT2H", "instances": 2})
        assert made.status_code == 201
        if who == "ml-vision":
            path = path.format(lease=made.get_json()["lease"]["id"])   # a lease's events: the caller's own
    module_name, name = work.rsplit(".", 1)
    module = importlib.import_module(module_name)
    real = getattr(module, name)
    blocked: list[bool] = []

    def working(*args, **kwargs):
        out = real(*args, **kwargs)   # the transaction has begun and read
        other = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            blocked.append(False)
        except sqlite3.OperationalError:   # database is locked
            blocked.append(True)
        finally:
            other.close()
        return out
    monkeypatch.setattr(module, name, working)
    reply = client.open(path, method=method, json=body, headers=headers())
    assert reply.status_code == status, reply.get_data(as_text=True)[:500]
    assert blocked == [False]


def test_a_projects_dry_runs_are_limited_per_minute_with_a_429_that_says_when(app_with):
    """A dry run writes nothing, so no other limit held it, and each plans the whole queue and
    its counter-offers (0.3-0.4 s of CPU at 1,000 waiting): a member asking in a loop kept the
    API planning for it. Past max_dry_runs_per_minute a project's next is a 429 with
    Retry-After; other projects, and creates, are not held back; a minute later it may again."""
    app = app_with(max_dry_runs_per_minute=3)
    client, clock = app.test_client(), app.extensions["gpu_tenancy"].clock

    def dry_run(project="ml-vision", user=None):
        return client.post("/v1/leases", query_string={"dry_run": "true"}, headers=headers(project, user=user),
                           json={"shape": "a100.x1", "duration": "PT1H"})

    assert [dry_run().status_code for _ in range(2)] == [200, 200]
    clock.advance(20)
    assert dry_run(user="another-member").status_code == 200   # counted per project, whoever asks
    refused = dry_run()
    err = error(refused, 429)
    assert err["code"] == "gpu_tenancy.too_many_dry_runs"
    assert "3 dry runs in the last minute" in err["detail"] and "ask again in 40 s" in err["detail"]
    assert refused.headers["Retry-After"] == "40"
    assert dry_run("nlp-lab").status_code == 200                # another project is not held back
    assert client.post("/v1/leases", headers=headers(), json={"shape": "a100.x1", "duration": "PT1H"}
                       ).status_code == 201                     # nor is a create
    clock.advance(40)                                           # the first two are a minute old
    assert [dry_run().status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.skipif(bool(PG_URL), reason="SQLite's snapshot of a read (on PostgreSQL the ledger lock is a row lock)")
def test_a_dry_run_of_a_project_with_a_budget_reads_through_a_write_made_meanwhile(client, db_url, monkeypatch):
    """A budget's check takes the ledger lock (engine/leases.py); in a dry run, a read that holds
    no write lock, SQLite's UPDATE for it would take the write lock halfway, and fail at once
    ("database is locked") once another connection had written since the read's first statement."""
    import sqlite3

    admin = headers("ml-vision", "admin", user="ops")
    assert client.post("/v1/budgets", headers=admin, json={"budget": {
        "project_id": "ml-vision", "gpu_model": "A100", "gpu_hours": 100, "period": "month"}}).status_code == 201
    real = ask_facts.read

    def read_then_another_writes(*args, **kwargs):
        out = real(*args, **kwargs)
        other = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=5, isolation_level=None)
        try:
            other.execute("UPDATE locks SET holder = holder WHERE name = 'engine'")
        finally:
            other.close()
        return out
    monkeypatch.setattr(ask_facts, "read", read_then_another_writes)
    reply = client.post("/v1/leases?dry_run=true", headers=headers(), json={"shape": "a100.x1", "duration": "PT2H"})
    assert reply.status_code == 200, reply.get_data(as_text=True)[:500]

"""Parking an idle lease (an idle rule's `then: park`, engine/park.py and engine/resume.py):
its VMs shelved, its GPUs given to the queue, a resume slot held for the time it had left,
the resume at that slot (or sooner, when asked and nobody is delayed), and a delete while
parked."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.engine import park
from gpu_tenancy.timeutil import parse_time, rfc3339
from tests.conftest import headers
from tests.functional.test_idle_rules import lease_of, minutes
from tests.functional.test_lease_races import borrower_two_hours_in

GRACE = 600
RULES = [{"warn_after_minutes": 10, "then": "park", "then_after_minutes": 20}]


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779", idle_rules=RULES, park_grace_seconds=GRACE,
                       webhook_allowed_networks=["127.0.0.0/8"])


def running(client, engine_tick, project, **extra):
    body = {"shape": "h100.x4", "duration": "PT8H", "readiness_probe": True, **extra}
    made = client.post("/v1/leases", json=body, headers=headers(project)).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    assert lease_of(client, made["id"], project)["status"] == "active"
    return made["id"], made["readiness"]["token"]


def idle_until_parked(client, engine_tick, idle, token, busy, busy_token):
    """20 idle minutes (warned at 10), then the ticks the shelve takes."""
    minutes(client, engine_tick, 20, [(idle, token, [0, 0, 0, 0]), (busy, busy_token, [90, 90, 90, 90])])
    assert lease_of(client, idle)["status"] == "parking"
    engine_tick(advance=10)   # the simulated cloud offloads delete_seconds after the shelve


@pytest.fixture
def parked(client, engine_tick, cloud):
    """ml-vision's idle lease (with a volume) parked on one H100 host, nlp-lab's busy one on the
    other, and nlp-lab's waiting lease of an hour."""
    client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": "http://127.0.0.1:9/hook"}}, headers=headers())
    idle, token = running(client, engine_tick, "ml-vision", volume={"size_gb": 10})
    busy, busy_token = running(client, engine_tick, "nlp-lab")
    waiting = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT1H"},
                          headers=headers("nlp-lab")).get_json()["lease"]["id"]
    before = lease_of(client, idle)
    idle_until_parked(client, engine_tick, idle, token, busy, busy_token)
    return dict(idle=idle, busy=busy, waiting=waiting, before=before, volume=before["volume"]["id"])


def events(client, lease, project="ml-vision"):
    return client.get(f"/v1/leases/{lease}/events", headers=headers(project)).get_json()["events"]


def holds_at_every_instant(runtime):
    """No host's GPUs booked twice and no project over its nominal H100 quota plus borrowing, at
    any instant where an allocation starts, counting the leases that reserve GPUs."""
    with session_scope(runtime.sessions) as session:
        rows = session.execute(select(m.Allocation, m.Lease.status).join(m.Lease).where(
            m.Lease.status.in_(["scheduled", "provisioning", "active", "ending", "parking", "parked",
                                "resuming"]))).all()
        sizes = dict(session.execute(select(m.Host.name, m.Host.gpus)).all())
        quotas = {(q.project_id, q.gpu_model): q.gpus + q.borrow_gpus for q in session.scalars(select(m.Quota))}
        spans = [(a.host, a.project_id, a.gpu_model, a.gpus, to_epoch(a.start_at), to_epoch(a.end_at))
                 for a, _ in rows]
    for instant in {s[4] for s in spans}:
        on = [s for s in spans if s[4] <= instant < s[5]]
        for host in {s[0] for s in on}:
            assert sum(s[3] for s in on if s[0] == host) <= sizes[host], (host, instant)
        for key in {(s[1], s[2]) for s in on}:
            assert sum(s[3] for s in on if (s[1], s[2]) == key) <= quotas[key], (key, instant)


def until_resumed(client, runtime, engine_tick, lease, resume_by, step=600):
    """The engine run to the slot and a minute past it, no GPU booked twice at any step; the lease then."""
    holds_at_every_instant(runtime)
    while runtime.clock.now() < resume_by:
        engine_tick(advance=min(step, resume_by - runtime.clock.now()))
        holds_at_every_instant(runtime)
    for _ in range(6):
        engine_tick(advance=10)
    return lease_of(client, lease)


def test_an_idle_lease_is_parked_its_gpus_go_to_the_queue_and_it_resumes_at_its_slot(
        client, runtime, engine_tick, cloud, parked):
    idle, waiting = parked["idle"], parked["waiting"]
    lease = lease_of(client, idle)
    assert lease["status"] == "parked"
    server = parked["before"]["servers"][0]
    assert cloud.servers()[server["id"]]["status"] == "SHELVED_OFFLOADED"
    assert cloud.free_gpus()[server["host"]] == 0          # given to the waiting lease at once
    assert lease_of(client, waiting, "nlp-lab")["status"] in ("provisioning", "active")
    assert {a["host"] for a in lease_of(client, waiting, "nlp-lab")["allocations"]} == {server["host"]}
    assert idle not in cloud.lease_inventory()             # no unit: nobody unshelves it outside its slot
    # the held slot: its time left, after the waiting lease, no sooner than the grace period
    park = lease["park"]
    parked_at, resume_by = parse_time(park["parked_at"]), parse_time(park["resume_by"])
    waiting_end = parse_time(lease_of(client, waiting, "nlp-lab")["end"])
    assert resume_by >= max(parked_at + GRACE, waiting_end)
    parking_at = next(parse_time(e["at"]) for e in events(client, idle) if e["to"] == "parking")
    assert park["remaining"] == parse_time(parked["before"]["end"]) - parking_at   # what it had left
    # it started when it started (the wait and ETA figures read that); the window now ends with the slot
    assert lease["start"] == parked["before"]["start"]
    assert lease["duration"] == parse_time(lease["end"]) - parse_time(lease["start"])
    assert [(a["start"], a["end"]) for a in lease["allocations"]] == [
        (park["resume_by"], lease["end"])] and parse_time(lease["end"]) - resume_by == park["remaining"]
    assert "parked after 20 idle minutes" in next(e["message"] for e in events(client, idle) if e["kind"] == "warning")
    with session_scope(runtime.sessions) as session:
        notices = [d.event for d in session.scalars(select(m.WebhookDelivery).where(
            m.WebhookDelivery.lease_id == idle).order_by(m.WebhookDelivery.id))]
        assert notices == ["lease.idle", "lease.parked"]
    assert client.post(f"/v1/leases/{idle}/utilization", headers={"X-Lease-Token": "x"},
                       json={"instance": 0, "gpus": []}).status_code in (401, 403, 404, 409)
    # the waiting lease runs its hour and ends; at the slot the lease comes back
    lease = until_resumed(client, runtime, engine_tick, idle, resume_by, step=300)
    assert lease_of(client, waiting, "nlp-lab")["status"] == "ended"
    assert lease["status"] == "active" and lease["park"] is None
    back = cloud.servers()[server["id"]]
    assert back["status"] == "ACTIVE" and back["host"] == lease["allocations"][0]["host"]
    assert cloud.volumes()[parked["volume"]]["attached_to"] == server["id"]
    assert lease["end"] == rfc3339(resume_by + park["remaining"])
    assert [e["to"] for e in events(client, idle) if e["to"]][-4:] == ["parking", "parked", "resuming", "active"]
    with session_scope(runtime.sessions) as session:
        assert session.get(m.LeaseActivity, idle) is None   # its idle time counts from the resume
        last = session.scalars(select(m.WebhookDelivery).where(m.WebhookDelivery.lease_id == idle)
                               .order_by(m.WebhookDelivery.id.desc())).first()
        assert last.event == "lease.resumed" and json.loads(last.body)["lease"]["status"] == "active"


def test_resume_keeps_the_held_slot_while_a_sooner_one_would_delay_someone(client, engine_tick, parked):
    idle = parked["idle"]
    held = lease_of(client, idle)["park"]["resume_by"]
    answer = client.post(f"/v1/leases/{idle}/resume", headers=headers())
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["lease"]["status"] == "parked"
    assert answer.get_json()["lease"]["park"]["resume_by"] == held
    assert events(client, idle)[-1]["message"].startswith("resume asked: no sooner slot is free")


def test_resume_now_once_the_gpus_are_free(client, runtime, engine_tick, cloud, parked):
    idle = parked["idle"]
    assert client.delete(f"/v1/leases/{parked['waiting']}", headers=headers("nlp-lab")).status_code == 204
    engine_tick(advance=10)
    engine_tick(advance=10)
    answer = client.post(f"/v1/leases/{idle}/resume", headers=headers()).get_json()["lease"]
    assert answer["status"] == "resuming"
    now = runtime.clock.now()
    assert parse_time(answer["allocations"][0]["start"]) == now
    holds_at_every_instant(runtime)
    for _ in range(4):
        engine_tick(advance=10)
    lease = lease_of(client, idle)
    assert lease["status"] == "active"
    server = parked["before"]["servers"][0]["id"]
    assert cloud.servers()[server]["status"] == "ACTIVE"
    assert cloud.volumes()[parked["volume"]]["attached_to"] == server


def test_only_a_parked_lease_is_resumed(client, parked):
    answer = client.post(f"/v1/leases/{parked['busy']}/resume", headers=headers("nlp-lab"))
    assert answer.status_code == 409
    error = answer.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.lease_not_parked" and "only a parked lease" in error["detail"]
    other = client.post(f"/v1/leases/{parked['idle']}/resume", headers=headers("nlp-lab"))
    assert other.status_code == 404


def test_delete_while_parked_deletes_the_shelved_vms_and_keeps_the_volume(client, runtime, engine_tick, cloud,
                                                                          parked):
    idle = parked["idle"]
    server = parked["before"]["servers"][0]["id"]
    assert client.delete(f"/v1/leases/{idle}", headers=headers()).status_code == 204
    engine_tick(advance=10)
    engine_tick(advance=10)
    lease = lease_of(client, idle)
    assert lease["status"] == "ended"
    assert server not in cloud.servers()
    assert cloud.volumes()[parked["volume"]]["status"] == "available"
    assert idle not in cloud.lease_inventory() and not any(idle in c.lower().replace("_", "-")
                                                           for c in cloud.lease_classes())
    with session_scope(runtime.sessions) as session:   # the held slot, never used, is gone
        assert all(to_epoch(a.start_at) <= runtime.clock.now() for a in session.scalars(
            select(m.Allocation).where(m.Allocation.lease_id == idle)))


@pytest.mark.parametrize("refusal", [
    "Cannot 'shelve' instance while it is in task_state image_snapshot (HTTP 409)",
    "Invalid state of instance: it is resized, not confirmed (HTTP 400)"])
def test_a_shelve_the_cloud_keeps_refusing_parks_the_lease_without_its_vms_rather_than_fail_it(
        client, runtime, engine_tick, cloud, refusal):
    """Every shelve refused (Nova's 409 for a VM in a task of its tenant's, a 400): once the parking
    has taken boot_timeout_seconds, it does not hold its GPUs past its end, nor is it failed (its
    time lost, for a refusal that is most often transient): its VMs are deleted and it parks
    without them, its time left and data volume kept, and at its slot it is booted again from its
    image with its volume, as a lease whose host went down while it parked is."""
    lid, token = running(client, engine_tick, "ml-vision", duration="PT8H", volume={"size_gb": 10})
    volume = lease_of(client, lid)["volume"]["id"]
    [server] = [s for s, v in cloud.servers().items() if v["lease_id"] == lid]
    cloud.inject_failure("shelve", F.API_ERROR, times=10_000, message=refusal)
    minutes(client, engine_tick, 20, [(lid, token, [0, 0, 0, 0])])
    lease = lease_of(client, lid)
    assert lease["status"] == "parking"
    parking_at = next(parse_time(e["at"]) for e in events(client, lid) if e["to"] == "parking")
    left = parse_time(lease["end"]) - parking_at   # what it had left as it began parking: kept
    for _ in range(runtime.config.boot_timeout_seconds // 600 + 2):
        engine_tick(advance=600)
        if lease_of(client, lid)["status"] != "parking":
            break
    lease = lease_of(client, lid)
    assert lease["status"] == "parked" and lease["failure"] is None, (lease["status"], lease["failure"])
    assert [(f["class"], f["action"]) for f in lease["failures"]] == [("api_error", "replaced")], lease["failures"]
    assert "did not shelve its VMs within" in lease["failures"][0]["message"]
    engine_tick(advance=60)
    assert server not in cloud.servers() and cloud.volumes()[volume]["status"] == "available"
    assert lid not in cloud.lease_inventory()
    holds_at_every_instant(runtime)
    park = lease_of(client, lid)["park"]
    assert park["remaining"] == left
    resumed = until_resumed(client, runtime, engine_tick, lid, parse_time(park["resume_by"]))
    assert resumed["status"] == "active", resumed["status"]
    assert resumed["servers"][0]["id"] != server and cloud.volumes()[volume]["status"] == "in-use"


def test_a_resume_asked_that_moves_the_slot_sooner_tells_the_webhook_its_new_resume_by(
        client, runtime, engine_tick, cloud):
    """The held slot, planned after every lease waiting at the park, moved sooner on the tenant's
    ask once one of those is cancelled: `lease.parked` goes again with the new `resume_by`, as it
    does when the engine moves the slot (the one sent at the park is stale)."""
    client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": "http://127.0.0.1:9/hook"}}, headers=headers())
    idle, token = running(client, engine_tick, "ml-vision")
    busy, busy_token = running(client, engine_tick, "nlp-lab")
    nlp = headers("nlp-lab")
    client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT1H"}, headers=nlp)
    second = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT3H"}, headers=nlp).get_json()["lease"]
    idle_until_parked(client, engine_tick, idle, token, busy, busy_token)
    held = parse_time(lease_of(client, idle)["park"]["resume_by"])
    assert client.delete(f"/v1/leases/{second['id']}", headers=nlp).status_code == 204
    asked = client.post(f"/v1/leases/{idle}/resume", headers=headers("ml-vision"))
    assert asked.status_code == 200, asked.get_json()
    moved = parse_time(lease_of(client, idle)["park"]["resume_by"])
    assert runtime.clock.now() < moved < held, (moved, held)
    with session_scope(runtime.sessions) as session:
        told = [(d.event, json.loads(d.body)) for d in session.scalars(select(m.WebhookDelivery).where(
            m.WebhookDelivery.lease_id == idle).order_by(m.WebhookDelivery.id))]
    assert [event for event, _ in told] == ["lease.idle", "lease.parked", "lease.parked"], told
    assert parse_time(told[-1][1]["lease"]["resume_by"]) == moved, told[-1]
    holds_at_every_instant(runtime)


def test_an_idle_lease_under_a_reclaim_notice_is_not_parked_and_ends_at_its_notice(client, runtime, engine_tick):
    """A borrower under notice (reclaimed for a lease within quota: test_contention.py's story)
    that its idle rule would park: parked, it kept the notice and its end cut to the notice, so
    once resumed the engine ended it at once, for a lease long started. It is not parked: it
    ends at its notice, as reclaimed."""
    extra = borrower_two_hours_in(client, engine_tick)
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                headers=headers("nlp-lab"))
    engine_tick()
    noticed = lease_of(client, extra)
    assert noticed["status"] == "active" and noticed["early_end"]["kind"] == "reclaimed", noticed
    park.begin(runtime.engine.lifecycle, extra, "idle for 20 minutes")
    assert lease_of(client, extra)["status"] == "active"
    for _ in range(8):
        engine_tick(advance=180)
    ended = lease_of(client, extra)
    assert ended["status"] == "preempted" and ended["end"] == noticed["early_end"]["at"], ended


def test_a_parked_leases_held_slot_counts_against_the_projects_budget(client, runtime, parked):
    """Review 2. The held slot is GPU-hours the lease will use when it resumes. Before: a parked
    lease's allocations counted neither as used nor as planned, so its budget showed them left
    and a new lease took them; at the resume the project went past its budget."""
    idle = lease_of(client, parked["idle"])
    slot_hours = 4 * idle["park"]["remaining"] / 3600             # h100.x4, the time it had left
    admin = headers("ml-vision", "admin", user="ops")
    made = client.post("/v1/budgets", headers=admin, json={"budget": {
        "project_id": "ml-vision", "gpu_model": "H100", "gpu_hours": slot_hours + 6, "period": "month"}})
    assert made.status_code == 201, made.get_json()
    current = made.get_json()["budget"]["current"]
    assert current["planned"] >= slot_hours - 0.01, current      # the slot is planned
    assert current["left"] < 6, current
    # 8 GPU-hours more than the budget has left once the slot is counted
    more = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT2H"}, headers=headers())
    assert more.status_code == 403, more.get_json()
    assert more.get_json()["errors"][0]["code"] == "gpu_tenancy.over_budget"


def test_a_resume_that_would_move_hours_into_a_spent_period_is_refused_and_nothing_moves(
        client, runtime, engine_tick, parked):
    """The held slot lies past a budget's range; the project spent the range's rest meanwhile.
    Before: the resume moved the slot into the range, past its budget, with no check (a monthly
    budget the same across a month's end: tests/property/test_budget_months_property.py). Now a
    403 in the budget's words, and the lease stays parked with its slot."""
    idle = parked["idle"]
    assert client.delete(f"/v1/leases/{parked['waiting']}", headers=headers("nlp-lab")).status_code == 204
    engine_tick(advance=10)
    engine_tick(advance=10)
    held = lease_of(client, idle)["park"]["resume_by"]
    now = runtime.clock.now()
    admin = headers("ml-vision", "admin", user="ops")
    made = client.post("/v1/budgets", headers=admin, json={"budget": {
        "project_id": "ml-vision", "gpu_model": "H100", "gpu_hours": 4, "period": "range",
        "start": rfc3339(now - 86400), "end": held}})
    assert made.status_code == 201, made.get_json()
    assert made.get_json()["budget"]["current"]["left"] < 4 * (parse_time(held) - now) / 3600
    answer = client.post(f"/v1/leases/{idle}/resume", headers=headers())
    assert answer.status_code == 403, answer.get_json()
    error = answer.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.over_budget", error
    assert "more H100 GPU-hours" in error["detail"] and f"keeps its held slot from {held}" in error["detail"], error
    lease = lease_of(client, idle)
    assert lease["status"] == "parked" and lease["park"]["resume_by"] == held, lease
    assert not events(client, idle)[-1]["message"].startswith("resume asked"), events(client, idle)[-1]

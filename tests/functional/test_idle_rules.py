"""The operator's idle rules, applied by the engine from the agents' reports: warn (an event
and the lease.idle webhook, through the outbox), then end the lease, never sooner than the
rule's notice after the warning, and never on missing reports."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine import gpu_activity
from tests.conftest import PG_URL, headers
from tests.functional.test_host_failure import host_goes
from tests.functional.test_gpu_activity import active, report
from tests.races import Held, race

RULES = [{"warn_after_minutes": 10, "then": "end", "then_after_minutes": 20},   # everyone else
         {"project_id": "nlp-lab", "warn_after_minutes": 10}]                  # warned only


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779", idle_rules=RULES,
                       webhook_allowed_networks=["127.0.0.0/8"])


def minutes(client, engine_tick, n, reports):
    """n minutes of the engine, each with the given reports: [(lease, token, utilizations)]."""
    for _ in range(n):
        for lease, token, utilizations in reports:
            assert report(client, lease, token, utilizations).status_code == 200
        engine_tick(advance=60)


def lease_of(client, lease, project="ml-vision"):
    return client.get(f"/v1/leases/{lease}", headers=headers(project)).get_json()["lease"]


def warnings(client, lease, project="ml-vision"):
    return [e["message"] for e in client.get(f"/v1/leases/{lease}/events", headers=headers(project)).get_json()[
        "events"] if e["kind"] == "warning" and "under 5 %" in e["message"]]


def test_an_idle_lease_is_warned_then_ended_and_its_gpus_go_to_the_queue(client, runtime, engine_tick):
    client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": "http://127.0.0.1:9/hook"}}, headers=headers())
    idle, token = active(client, engine_tick, shape="h100.x4")
    other, other_token = active(client, engine_tick, project="nlp-lab", shape="h100.x4")
    waiting = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT1H"},
                          headers=headers("nlp-lab")).get_json()["lease"]
    minutes(client, engine_tick, 9, [(idle, token, [0, 1, 0, 4]), (other, other_token, [60, 60, 60, 60])])
    assert warnings(client, idle) == []
    minutes(client, engine_tick, 2, [(idle, token, [0, 0, 0, 0]), (other, other_token, [60, 60, 60, 60])])
    assert warnings(client, idle) == [
        "every GPU of the lease has been under 5 % for 10 min; it will be ended after 20 idle minutes unless its "
        "GPUs are used. End it (DELETE, or gpu-done in the VM) to give the GPUs back"]
    with session_scope(runtime.sessions) as session:
        notice = session.scalars(select(m.WebhookDelivery).where(m.WebhookDelivery.lease_id == idle)).one()
        assert notice.event == "lease.idle" and json.loads(notice.body)["idle_seconds"] == 600
    assert lease_of(client, idle)["status"] == "active"
    minutes(client, engine_tick, 8, [(idle, token, [0, 0, 0, 0]), (other, other_token, [60, 60, 60, 60])])
    assert lease_of(client, idle)["status"] == "active"        # 19 idle minutes
    minutes(client, engine_tick, 1, [(idle, token, [0, 0, 0, 0]), (other, other_token, [60, 60, 60, 60])])
    engine_tick(advance=10)
    engine_tick(advance=10)
    assert lease_of(client, idle)["status"] == "ended"
    assert len(warnings(client, idle)) == 1
    events = client.get(f"/v1/leases/{idle}/events", headers=headers()).get_json()["events"]
    assert next(e for e in events if e["to"] == "ending")["message"].startswith("idle for 20 min")
    assert lease_of(client, waiting["id"], "nlp-lab")["status"] in ("scheduled", "provisioning", "active")
    assert lease_of(client, other, "nlp-lab")["status"] == "active"


def test_use_after_the_warning_starts_the_count_again(client, engine_tick):
    lease, token = active(client, engine_tick)
    minutes(client, engine_tick, 11, [(lease, token, [0, 0])])
    assert len(warnings(client, lease)) == 1
    minutes(client, engine_tick, 1, [(lease, token, [0, 50])])
    minutes(client, engine_tick, 15, [(lease, token, [0, 0])])
    assert lease_of(client, lease)["status"] == "active"       # 15 idle minutes since it was used
    assert len(warnings(client, lease)) == 2                   # warned again in the new idle spell


def test_a_warn_only_rule_never_ends_and_silence_is_not_idleness(client, runtime, engine_tick):
    warned_only, token = active(client, engine_tick, project="nlp-lab")
    silent, silent_token = active(client, engine_tick)
    assert report(client, silent, silent_token, [0, 0]).status_code == 200   # then nothing more
    minutes(client, engine_tick, 40, [(warned_only, token, [0, 0])])
    assert lease_of(client, warned_only, "nlp-lab")["status"] == "active"
    assert len(warnings(client, warned_only, "nlp-lab")) == 1
    assert lease_of(client, silent)["status"] == "active" and warnings(client, silent) == []


@pytest.mark.skipif(not PG_URL, reason="a race: on SQLite every transaction holds the database's write lock")
def test_a_busy_report_accepted_while_the_engine_decides_to_end_an_idle_lease_keeps_it(
        client, runtime, engine_tick, db_url, monkeypatch):
    """The engine's idle rules read the idle records, decide to end a lease, then end it under its
    lock; a report that its GPUs are busy, accepted (200) between the two, did not stop the end:
    the tenant's work, started just then, lost its VMs. The end now reads the record again under
    the lease's lock and leaves a lease no longer idle."""
    lease, token = active(client, engine_tick, shape="h100.x4")
    lc = runtime.engine.lifecycle
    point = Held(lambda step, *args: step == "end")
    monkeypatch.setattr(gpu_activity.ga, "idle_step", point.around(gpu_activity.ga.idle_step))

    def idle_minutes() -> None:   # a report of idle GPUs and the rules each minute, until the end is decided
        for _ in range(40):
            assert report(client, lease, token, [0, 0, 0, 0]).status_code == 200
            runtime.clock.advance(60)
            gpu_activity.apply_rules(lc)
            if point.passed.is_set() or lease_of(client, lease)["status"] != "active":
                return
    _, busy = race(db_url, point, idle_minutes, lambda: report(client, lease, token, [95, 95, 95, 95]).status_code)
    assert busy == 200 and point.passed.is_set()
    assert lease_of(client, lease)["status"] == "active", lease_of(client, lease)["status"]


def test_a_lease_rescued_off_a_down_host_is_idle_only_from_its_new_vms(client, runtime, cloud, engine_tick):
    """Fifteen idle minutes (warned at ten), then its host goes down and the lease is booted
    again on the other one: its new VMs' idleness counts from their own reports, as after a
    resume. The old VMs' spell (and warning) does not end the lease minutes after its reboot."""
    idle, token = active(client, engine_tick, shape="h100.x4")
    minutes(client, engine_tick, 15, [(idle, token, [0, 0, 0, 0])])
    assert len(warnings(client, idle)) == 1
    lost = lease_of(client, idle)["servers"][0]["host"]
    host_goes(runtime, cloud, engine_tick, lost, up=False)
    engine_tick(advance=30)
    moved = lease_of(client, idle)
    assert moved["status"] == "active" and moved["servers"][0]["host"] != lost
    for minute in range(6):                          # the job not yet restarted on the new VMs
        assert report(client, idle, token, [0, 0, 0, 0]).status_code == 200
        engine_tick(advance=60)
        assert lease_of(client, idle)["status"] == "active", f"ended {minute + 1} min after its reboot"
    with session_scope(runtime.sessions) as session:
        [row] = [r for r in gpu_activity.idle_now(session, runtime.clock.now(), 5) if r["lease_id"] == idle]
        assert row["idle_minutes"] <= 6

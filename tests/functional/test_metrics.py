"""/metrics: the figures Prometheus scrapes, read back with prometheus_client's own parser."""
from __future__ import annotations

import random
from datetime import datetime

import pytest

from prometheus_client.parser import text_string_to_metric_families

from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.failures import FailureClass
from gpu_tenancy.engine import housekeeping, reports
from tests.conftest import headers


def scrape(client, **kw) -> dict:
    reply = client.get("/metrics", **{"headers": headers("ops", "admin"), **kw})
    assert reply.status_code == 200
    assert reply.content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(reply.get_data(as_text=True)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0)


def test_metrics_follow_the_leases(client, cloud, engine_tick):
    for project, duration in (("ml-vision", "PT2H"), ("nlp-lab", "PT3H")):   # all 32 A100
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": duration},
                            headers=headers(project))
        assert reply.status_code == 201, reply.get_json()
    waiting = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"},
                          headers=headers()).get_json()["lease"]
    assert waiting["status"] == "queued"
    engine_tick()
    engine_tick(advance=60)

    samples = scrape(client)
    assert value(samples, "gpu_tenancy_gpus_in_use", gpu_model="A100", project_id="ml-vision") == 16
    assert value(samples, "gpu_tenancy_gpus_in_use", gpu_model="A100", project_id="nlp-lab") == 16
    assert value(samples, "gpu_tenancy_gpus", gpu_model="A100") == 32
    reason = waiting["queue"]["reasons"][0]["code"]
    assert value(samples, "gpu_tenancy_pending_leases", gpu_model="A100", reason=reason) == 1
    assert value(samples, "gpu_tenancy_leases", status="active") == 2
    assert value(samples, "gpu_tenancy_admission_wait_time_seconds_count", gpu_model="A100") == 2
    assert value(samples, "gpu_tenancy_planner_duration_seconds_count") >= 2

    engine_tick(advance=2 * 3600)                  # ml-vision's pair ends, the waiting one starts
    engine_tick(advance=60)
    engine_tick(advance=60)
    samples = scrape(client)
    assert value(samples, "gpu_tenancy_pending_leases", gpu_model="A100", reason=reason) == 0
    assert value(samples, "gpu_tenancy_gpus_in_use", gpu_model="A100", project_id="ml-vision") == 8
    assert value(samples, "gpu_tenancy_gpus_in_use", gpu_model="A100", project_id="nlp-lab") == 16
    assert value(samples, "gpu_tenancy_admission_wait_time_seconds_count", gpu_model="A100") == 3
    waited = value(samples, "gpu_tenancy_admission_wait_time_seconds_sum", gpu_model="A100")
    assert 2 * 3600 - 60 <= waited <= 2 * 3600 + 180
    assert value(samples, "gpu_tenancy_admission_wait_time_seconds_bucket", gpu_model="A100", le="3600.0") == 2
    assert value(samples, "gpu_tenancy_admission_wait_time_seconds_bucket", gpu_model="A100", le="10800.0") == 3


def test_failures_are_counted_by_class(client, cloud, engine_tick):
    cloud.inject_failure("boot", FailureClass.NOVA_QUOTA)
    client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=headers())
    engine_tick()
    engine_tick(advance=30)
    samples = scrape(client)
    assert value(samples, "gpu_tenancy_lease_failures_total", failure_class="nova_quota") == 1
    assert value(samples, "gpu_tenancy_lease_failures_total", failure_class="image") == 0


def test_metrics_are_kept_for_admins(config, clock, cloud):
    from gpu_tenancy.app import create_app
    client = create_app(config, clock=clock, cloud=cloud, start_engine=False).test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=headers()).status_code == 403
    assert client.get("/metrics", headers=headers("admin", "admin")).status_code == 200




def test_eta_honesty_holds_each_started_lease_to_its_first_eta(client, clock, engine_tick, sessions):
    """Two leases wait behind the whole A100 pool. The first starts at its first ETA; the
    second an hour past it (the hosts it was promised were drained after it was told)."""
    t0 = clock.now()
    blockers = {}
    for project, duration in (("ml-vision", "PT2H"), ("nlp-lab", "PT3H")):   # 16 A100 each: the whole pool
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": duration},
                            headers=headers(project))
        assert reply.status_code == 201, reply.get_json()
        blockers[project] = reply.get_json()["lease"]
    engine_tick()
    assert ("gpu_tenancy_eta_kept_ratio", ()) not in scrape(client)   # nobody has waited yet: no figure

    def wait_for(project: str) -> dict:
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT1H"},
                            headers=headers(project))
        assert reply.status_code == 201, reply.get_json()
        lease = reply.get_json()["lease"]
        assert lease["status"] == "queued" and lease["queue"]["eta"]
        return lease

    def run_until_active(lease: dict, project: str, until: int) -> dict:
        engine_tick(advance=until - 120 - clock.now())
        for _ in range(10):
            engine_tick(advance=60)
            now = client.get(f"/v1/leases/{lease['id']}", headers=headers(project)).get_json()["lease"]
            if now["status"] == "active":
                return now
        raise AssertionError(f"{lease['id']} never started")

    first = wait_for("ml-vision")                                     # told 2 h: ml-vision's pair ends
    first_run = run_until_active(first, "ml-vision", t0 + 2 * 3600)
    second = wait_for("nlp-lab")                                      # told 3 h: nlp-lab's pair ends
    # the first is extended (it delays no one yet), then nlp-lab's hosts are drained: the
    # second has to wait for the first's hosts, an hour past what it was told
    reply = client.patch(f"/v1/leases/{first['id']}", json={"duration": "PT2H"}, headers=headers("ml-vision"))
    assert reply.status_code == 200, reply.get_json()
    for host in {a["host"] for a in blockers["nlp-lab"]["allocations"]}:
        assert client.patch(f"/v1/hosts/{host}", json={"drained": True},
                            headers=headers("admin", "admin")).status_code == 200
    second_run = run_until_active(second, "nlp-lab", t0 + 4 * 3600)
    late = [max(0, epoch(run["start"]) - epoch(told["queue"]["eta"]))
            for told, run in ((first, first_run), (second, second_run))]
    assert late[0] <= 600 < 3600 - 600 <= late[1] <= 3600 + 600   # kept; about an hour late

    samples = scrape(client)
    assert value(samples, "gpu_tenancy_eta_kept_ratio") == 0.5
    # the first told no margin (nothing had started), the second the first's lateness ratio (a
    # minute or so late over 2 h): neither start-by far past the ETA, so the second's missed too
    assert first["queue"]["start_by"] == first["queue"]["eta"]
    assert 0 < epoch(second["queue"]["start_by"]) - epoch(second["queue"]["eta"]) <= 600
    assert value(samples, "gpu_tenancy_start_by_kept_ratio") == 0.5
    assert value(samples, "gpu_tenancy_eta_lateness_seconds_count", gpu_model="A100") == 2
    assert value(samples, "gpu_tenancy_eta_lateness_seconds_bucket", gpu_model="A100", le="600.0") == 1
    assert value(samples, "gpu_tenancy_eta_lateness_seconds_bucket", gpu_model="A100", le="10800.0") == 2
    assert value(samples, "gpu_tenancy_eta_lateness_seconds_sum", gpu_model="A100") == sum(late)
    # the admin figures page's rows: the same two leases, by the day they started
    with session_scope(sessions) as session:
        figures = reports.all_figures(session, t0 - 86400, clock.now() + 3600, clock.now(), 0)
    assert figures["eta_kept"] == figures["eta_lateness"] == [
        {"day": "2026-12-01", "leases": 2, "kept": 1, "share": 0.5,
         "p50_lateness_seconds": min(late), "p90_lateness_seconds": max(late), "start_by_share": 0.5}]


def epoch(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


PROJECTS = ("ml-vision", "nlp-lab")
SHAPES = ("a100.x1", "a100.x4", "a100.x8", "h100.x1", "h100.x4")


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_every_counter_only_grows_over_a_random_history(client, runtime, cloud, engine_tick, seed):
    """Leases asked for, cancelled, shortened, extended and done, boots that fail, hosts that go
    down and come back, utilisation reports, the engine's housekeeping, as time runs: after each
    step, no `_total` sample on /metrics is below what an earlier scrape showed (Prometheus reads
    any decrease as a restart, and rate() takes the whole counter for the increase)."""
    runtime.config.readiness_url = "http://gpu-tenancy.example:8779"   # leases with a secret, for the agents' reports
    rng = random.Random(seed)
    made: list[tuple[str, str, str | None]] = []        # (project, lease id, its secret)
    down: set[str] = set()
    shown: dict = {}
    for step in range(120):
        action = rng.random()
        project = rng.choice(PROJECTS)
        if action < 0.25:
            reply = client.post("/v1/leases", json={
                "shape": rng.choice(SHAPES), "instances": rng.choice([1, 1, 2]), "readiness_probe": True,
                "duration": rng.choice([600, 1800, 3600, 3 * 3600])}, headers=headers(project))
            if reply.status_code == 201:
                lease = reply.get_json()["lease"]
                made.append((project, lease["id"], lease["readiness"]["token"]))
        elif action < 0.32 and made:
            owner, lease_id, _ = rng.choice(made)
            client.delete(f"/v1/leases/{lease_id}", headers=headers(owner))
        elif action < 0.40 and made:
            owner, lease_id, _ = rng.choice(made)
            client.patch(f"/v1/leases/{lease_id}", json={"duration": rng.choice([600, 1800, 7200]),
                                                         "shrink": rng.random() < 0.5}, headers=headers(owner))
        elif action < 0.45 and made:
            owner, lease_id, _ = rng.choice(made)
            client.post(f"/v1/leases/{lease_id}/done", headers=headers(owner))
        elif action < 0.55 and (running := [(o, i, t) for o, i, t in made if client.get(
                f"/v1/leases/{i}", headers=headers(o)).get_json()["lease"]["status"] == "active"]):
            owner, lease_id, secret = rng.choice(running)
            client.post(f"/v1/leases/{lease_id}/utilization", headers={"X-Lease-Token": secret}, json={
                "instance": 0, "gpus": [{"index": 0, "utilization": rng.randrange(101), "memory_used_mib": 1}]})
        elif action < 0.60:
            cloud.inject_failure("server_error", rng.choice([FailureClass.NO_VALID_HOST, FailureClass.IMAGE]))
        elif action < 0.65:
            host = rng.choice([h.name for h in cloud.capacity()])
            up = host in down
            cloud.set_host_state(host, up=up)
            (down.discard if up else down.add)(host)
        elif action < 0.70:
            housekeeping.run(runtime.sessions, runtime.clock.now(), runtime.config)
        else:
            engine_tick(advance=rng.choice([5, 20, 30, 60, 300, 900, 3600]))
        now = {key: v for key, v in scrape(client).items() if key[0].endswith("_total")}
        fell = {key: (shown[key], v) for key, v in now.items() if key in shown and v < shown[key]}
        gone = [key for key in shown if key not in now]
        assert not fell and not gone, (step, action, fell, {k: shown[k] for k in gone})
        shown = now
    for counter in ("gpu_tenancy_gpu_hours_allocated_total", "gpu_tenancy_gpu_hours_measured_total"):
        assert any(key[0] == counter and v > 0 for key, v in shown.items()), counter   # the history used them

"""/metrics: the figures Prometheus scrapes, read back with prometheus_client's own parser."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gpu_tenancy.domain.failures import FailureClass
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

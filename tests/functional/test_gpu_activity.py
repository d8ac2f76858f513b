"""The guest agent's utilisation reports (POST /v1/leases/{id}/utilization): who may send
them, their bounds, how they are counted into GPU-hours used, and the figures on the
admin figures page and /metrics. The real scripts (the probe, gpu-agent, gpu-done) run
here against a fake PCI tree and a fake nvidia-smi."""
from __future__ import annotations

import os
import stat
import subprocess
import threading

import pytest
from werkzeug.serving import make_server

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine import gpu_activity
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers
from tests.functional.test_dashboard import login
from tests.functional.test_readiness import guest_dirs
from tests.ports import free_port

PORT_RANGE = range(19050, 19100)   # apart from the integration tests' (run beside these on PostgreSQL)


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779", idle_minutes=10)


def active(client, engine_tick, project="ml-vision", shape="h100.x2", instances=1):
    made = client.post("/v1/leases", json={"shape": shape, "duration": "PT8H", "readiness_probe": True,
                                           "instances": instances}, headers=headers(project)).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    assert client.get(f"/v1/leases/{made['id']}", headers=headers(project)).get_json()["lease"]["status"] == "active"
    return made["id"], made["readiness"]["token"]


def report(client, lease_id, token, utilizations, instance=0, memory=1000):
    return client.post(f"/v1/leases/{lease_id}/utilization", headers={"X-Lease-Token": token}, json={
        "instance": instance, "gpus": [{"index": i, "utilization": u, "memory_used_mib": memory}
                                       for i, u in enumerate(utilizations)]})


def use_rows(runtime, start=0):
    with session_scope(runtime.sessions) as session:
        now = runtime.clock.now()
        return {(r["project_id"], r["gpu_model"]): r for r in gpu_activity.use_by_project(session, start, now + 1, now)}


def test_reports_count_into_gpu_hours_used_by_utilisation(client, runtime, engine_tick):
    lease, token = active(client, engine_tick)
    runtime.clock.advance(30)
    for utilizations in ([100, 0], [50, 50], [0, 0]):
        answer = report(client, lease, token, utilizations)
        assert answer.status_code == 200, answer.get_json()
        runtime.clock.advance(60)
    # three reports: the first covers the 60 s since the lease started (at most MAX_CREDIT), the
    # others the 60 s since the previous; two GPUs each
    row = use_rows(runtime)[("ml-vision", "H100")]
    assert row["measured_gpu_hours"] == round(3 * 60 * 2 / 3600, 3)
    assert row["used_gpu_hours"] == round((60 * 1.0 + 60 * 1.0 + 0) / 3600, 3)
    assert row["used_share"] == round(2 / 6, 3)
    assert row["allocated_gpu_hours"] > row["measured_gpu_hours"]


def test_a_silent_hour_is_not_counted(client, runtime, engine_tick):
    lease, token = active(client, engine_tick)
    report(client, lease, token, [100, 100])
    runtime.clock.advance(3600)
    report(client, lease, token, [100, 100])
    row = use_rows(runtime)[("ml-vision", "H100")]
    assert row["measured_gpu_hours"] == round((30 + gpu_activity.ga.MAX_CREDIT) * 2 / 3600, 3)


def test_a_vm_reporting_too_often_is_told_to_wait_and_nothing_is_counted(client, runtime, engine_tick):
    lease, token = active(client, engine_tick, instances=2)
    assert report(client, lease, token, [10, 10]).status_code == 200
    runtime.clock.advance(10)
    before = use_rows(runtime)
    again = report(client, lease, token, [10, 10])
    assert again.status_code == 429
    assert again.headers["Retry-After"] == str(gpu_activity.MIN_SPACING - 10)
    assert again.get_json()["errors"][0]["code"] == "gpu_tenancy.too_many_requests"
    assert use_rows(runtime) == before
    assert report(client, lease, token, [10, 10], instance=1).status_code == 200   # another VM: its own pace


@pytest.mark.parametrize("body, code", [
    ({"instance": 0, "gpus": [{"index": 0, "utilization": 101, "memory_used_mib": 0}]}, "gpu_tenancy.invalid_input"),
    ({"instance": 0, "gpus": [{"index": 0, "utilization": -1, "memory_used_mib": 0}]}, "gpu_tenancy.invalid_input"),
    ({"instance": 0, "gpus": [{"index": 0, "utilization": 5.5, "memory_used_mib": 0}]}, "gpu_tenancy.invalid_input"),
    ({"instance": 0, "gpus": [{"index": 0, "utilization": 5, "memory_used_mib": 0, "x": 1}]},
     "gpu_tenancy.invalid_input"),
    ({"instance": 0, "gpus": [{"index": 0, "utilization": 5, "memory_used_mib": 0}] * 2}, "gpu_tenancy.invalid_input"),
    ({"instance": 0, "gpus": [{"index": i, "utilization": 5, "memory_used_mib": 0} for i in range(3)]},
     "gpu_tenancy.too_many_gpus"),
    ({"instance": 1, "gpus": []}, "gpu_tenancy.unknown_instance"),
    ({"instance": 0}, "gpu_tenancy.invalid_input"),
    ({"instance": "0", "gpus": []}, "gpu_tenancy.invalid_input"),
])
def test_bad_reports_are_refused_and_keep_nothing(client, runtime, engine_tick, body, code):
    lease, token = active(client, engine_tick)
    answer = client.post(f"/v1/leases/{lease}/utilization", json=body, headers={"X-Lease-Token": token})
    assert answer.status_code == 400
    assert answer.get_json()["errors"][0]["code"] == code
    with session_scope(runtime.sessions) as session:
        assert session.get(m.LeaseActivity, lease) is None
        assert session.query(m.GpuUseHour).count() == 0


def test_who_may_report_and_when(client, runtime, engine_tick):
    lease, token = active(client, engine_tick)
    url = f"/v1/leases/{lease}/utilization"
    body = {"instance": 0, "gpus": []}
    assert client.post(url, json=body).status_code == 401
    assert client.post(url, json=body, headers=headers()).status_code == 401        # a token is no secret
    assert client.post(url, json=body, headers={"X-Lease-Token": token[:-1]}).status_code == 404   # no such lease
    big = client.post(url, data="{" + " " * 5000 + "}", content_type="application/json",
                      headers={"X-Lease-Token": token})
    assert big.status_code == 413
    later = client.post("/v1/leases", json={"shape": "h100.x2", "duration": "PT1H", "readiness_probe": True,
                                            "start": rfc3339(runtime.clock.now() + 86400)}, headers=headers())
    assert later.status_code == 201
    other = later.get_json()["lease"]
    refused = client.post(f"/v1/leases/{other['id']}/utilization", json=body,
                          headers={"X-Lease-Token": other["readiness"]["token"]})
    assert refused.status_code == 409
    client.delete(f"/v1/leases/{lease}", headers=headers())
    assert client.post(url, json=body, headers={"X-Lease-Token": token}).status_code == 409


def test_idle_leases_and_gpu_hours_on_metrics_and_the_figures_page(client, runtime, engine_tick):
    idle, idle_token = active(client, engine_tick)
    busy, busy_token = active(client, engine_tick, project="nlp-lab")
    for _ in range(12):
        assert report(client, idle, idle_token, [0, 2]).status_code == 200
        assert report(client, busy, busy_token, [90, 80]).status_code == 200
        runtime.clock.advance(60)
    with session_scope(runtime.sessions) as session:
        now_idle = gpu_activity.idle_now(session, runtime.clock.now(), 10)
    assert [(r["lease_id"], r["gpus"]) for r in now_idle] == [(idle, 2)]
    assert now_idle[0]["idle_minutes"] == 12
    text = client.get("/metrics", headers=headers(roles="admin")).get_data(as_text=True)
    assert 'gpu_tenancy_idle_leases{gpu_model="H100",project_id="ml-vision"} 1.0' in text
    assert 'gpu_tenancy_idle_gpus{gpu_model="H100",project_id="ml-vision"} 2.0' in text
    assert 'project_id="nlp-lab"' not in "".join(
        line for line in text.splitlines() if line.startswith("gpu_tenancy_idle"))
    used = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line.startswith("gpu_tenancy_gpu_hours_")}
    assert used['gpu_tenancy_gpu_hours_used_total{gpu_model="H100",project_id="nlp-lab"}'] == pytest.approx(
        (30 + 11 * 60) * 1.7 / 3600)
    # its first report came a minute after it started (the other lease started between)
    assert used['gpu_tenancy_gpu_hours_measured_total{gpu_model="H100",project_id="ml-vision"}'] == pytest.approx(
        12 * 60 * 2 / 3600)
    assert used['gpu_tenancy_gpu_hours_allocated_total{gpu_model="H100",project_id="ml-vision"}'] > 0
    # the admin figures page: its two panels, and their CSV
    login(client, roles=("admin",))
    page = client.get("/dashboard/admin/figures?days=1").get_data(as_text=True)
    assert "GPU-hours allocated and used" in page and "Idle leases (now)" in page
    csv = client.get("/dashboard/admin/figures/idle_leases.csv?days=1").get_data(as_text=True)
    assert csv.splitlines()[0] == "lease_id,project_id,gpu_model,gpus,idle_minutes"
    assert csv.splitlines()[1].startswith(idle)


def test_a_busy_report_ends_the_idle_spell(client, runtime, engine_tick):
    lease, token = active(client, engine_tick)
    for utilizations in ([0, 0], [0, 0], [0, 3], [0, 40], [0, 0]):
        answer = report(client, lease, token, utilizations)
        runtime.clock.advance(60)
    assert answer.get_json()["utilization"]["idle_seconds"] == 60
    assert answer.get_json()["utilization"]["instance_reports"] == 1


def fake_gpus(tmp_path, utilizations: list[int] | None):
    """A PCI tree with two NVIDIA GPUs; with `utilizations`, an nvidia-smi that reports them."""
    pci = tmp_path / "pci"
    for i in range(2):
        dev = pci / f"0000:8{i}:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if utilizations is None:
        smi.unlink(missing_ok=True)
        return pci, bin_dir
    lines = "\\n".join(f"{i}, {u}, {1000 * (i + 1)}" for i, u in enumerate(utilizations))
    smi.write_text('#!/bin/sh\ncase "$*" in *utilization.gpu*) printf "' + lines + '\\n" ;; '
                   '*) echo "NVIDIA H100, 81559 MiB, 31" ;; esac\n')
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return pci, bin_dir


@pytest.fixture
def served(app):
    """The app on a real port, as a lease's VM reaches it."""
    port = free_port(PORT_RANGE)
    app.extensions["gpu_tenancy"].config.readiness_url = f"http://127.0.0.1:{port}"
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port
    server.shutdown()


def test_the_real_agent_reports_and_gpu_done_ends_the_lease(client, runtime, engine_tick, served, tmp_path):
    from tests.functional.test_readiness import probe_of
    sent = []
    boot = runtime.cloud.boot
    runtime.cloud.boot = lambda request: (sent.append(request), boot(request))[1]
    lease, _ = active(client, engine_tick)
    probe = tmp_path / "probe.sh"
    probe.write_text(probe_of(sent[0].user_data)[0])
    pci, bin_dir = fake_gpus(tmp_path, [87, 0])
    dirs = guest_dirs(tmp_path)
    env = {**os.environ, "PCI_DEVICES": str(pci), "PATH": f"{bin_dir}:{os.environ['PATH']}", "WAIT_SECONDS": "0",
           **dirs}
    done = subprocess.run(["sh", str(probe)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    settings = (tmp_path / "etc" / "lease.env")
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    agent = [dirs["GT_BIN"] + "/gpu-agent"]
    ran = subprocess.run(agent, env={**env, "AGENT_ROUNDS": "1"}, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    with session_scope(runtime.sessions) as session:
        assert session.get(m.LeaseActivity, lease).latest == {"0": [[87, 1000], [0, 2000]]}
    # without nvidia-smi: the PCI tree's GPUs, idle unless their driver says otherwise
    runtime.clock.advance(60)
    fake_gpus(tmp_path / "second", None)
    (pci / "0000:80:00.0" / "gpu_busy_percent").write_text("35\n")
    env_no_smi = {**env, "PATH": os.environ["PATH"]}
    ran = subprocess.run(agent, env={**env_no_smi, "AGENT_ROUNDS": "1"}, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    with session_scope(runtime.sessions) as session:
        assert session.get(m.LeaseActivity, lease).latest == {"0": [[35, 0], [0, 0]]}
    # what the service refuses in a detail (controls, DEL, C1, direction turns) is left out: the lease ends
    ran = subprocess.run([dirs["GT_BIN"] + "/gpu-done", 'exit 0 "quoted"\ttab\x7f\x9b2J\u202e'], env=env,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    lease_now = client.get(f"/v1/leases/{lease}", headers=headers()).get_json()["lease"]
    assert lease_now["status"] == "ending"
    events = client.get(f"/v1/leases/{lease}/events", headers=headers()).get_json()["events"]
    assert events[-1]["message"] == "the work is done, said VM 0: exit 0 quotedtab2J"


def test_the_first_reports_of_two_vms_at_once_are_both_kept(app, client, runtime, engine_tick):
    """A gang's agents start together: their first reports make the lease's activity row and
    the hour's cell at the same moment (run on PostgreSQL too, where they are concurrent)."""
    lease, token = active(client, engine_tick, instances=2)
    barrier = threading.Barrier(8)
    answers: list[int] = []

    def send(instance):
        own = app.test_client()
        barrier.wait()
        answers.append(report(own, lease, token, [50, 50], instance=instance % 2).status_code)
    threads = [threading.Thread(target=send, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [200, 200] + [429] * 6     # one per VM; the rest too soon after it
    with session_scope(runtime.sessions) as session:
        assert set(session.get(m.LeaseActivity, lease).reported) == {"0", "1"}
        assert sum(c.measured_gpu_seconds for c in session.query(m.GpuUseHour)) == 2 * 2 * 30

"""The GPU readiness probe: a lease that asks for it gets the probe in its VMs'
user data, with its own secret; the probe's report (the real script, run here
against a fake PCI tree and a fake nvidia-smi) makes the lease ready."""
from __future__ import annotations

import email
import os
import stat
import subprocess
import threading

import pytest
from werkzeug.serving import make_server

from gpu_tenancy.config import Config
from gpu_tenancy.guest.readiness_probe import SCRIPT
from gpu_tenancy.engine import readiness
from tests.conftest import PG_URL, headers
from tests.races import Held, race
from tests.ports import free_port

PORT_RANGE = range(19000, 19050)   # apart from the integration tests' (run beside these on PostgreSQL)


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779")


@pytest.fixture
def boots(cloud):
    """The boot requests the engine sends to the cloud."""
    sent = []
    original = cloud.boot

    def boot(request):
        sent.append(request)
        return original(request)
    cloud.boot = boot
    return sent


def start_active(client, engine_tick, **extra):
    lease = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT2H", "readiness_probe": True,
                                            **extra}, headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    return client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]


def probe_of(user_data: str) -> tuple[str, list[str]]:
    """The probe part of the multipart user data, and the content types of all parts."""
    message = email.message_from_string(user_data)
    parts = [p for p in message.walk() if not p.is_multipart()]
    probe = next(p for p in parts if p.get_filename() == "gpu-readiness-probe.sh")
    return probe.get_payload(decode=True).decode(), [p.get_content_type() for p in parts]


def test_a_lease_with_the_probe_is_ready_only_after_every_vm_reports(client, engine_tick, boots):
    lease = start_active(client, engine_tick, instances=2)
    assert lease["status"] == "active"
    assert lease["ready"] is False
    assert lease["readiness"]["status"] == "waiting"
    tokens = {r.vm_index: probe_of(r.user_data)[0].split('READINESS_TOKEN="${READINESS_TOKEN:-')[1].split("}")[0]
              for r in boots}
    assert tokens[0] == tokens[1] and len(tokens[0]) >= 40
    url = f"/v1/leases/{lease['id']}/readiness"
    answer = client.post(url, json={"instance": 0, "ok": True, "gpus_visible": 2, "detail": "2 of 2"},
                         headers={"X-Lease-Token": tokens[0]})
    assert answer.status_code == 200
    assert answer.get_json()["readiness"]["status"] == "waiting"  # VM 1 has not said yet
    client.post(url, json={"instance": 1, "ok": True}, headers={"X-Lease-Token": tokens[1]})
    lease = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert lease["ready"] is True
    assert lease["readiness"]["status"] == "ready"
    assert [i["status"] for i in lease["readiness"]["instances"]] == ["ready", "ready"]
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    assert any(e["message"] == "every VM reported its GPUs ready" for e in events)


@pytest.mark.skipif(not PG_URL, reason="on SQLite every transaction holds the write lock from its start")
def test_two_vms_reporting_at_once_make_the_lease_ready(app, client, engine_tick, boots, db_url, monkeypatch):
    """The first report held past its write of its VM's readiness: the second waits for it and
    then sees both (each saw only its own, and the lease was never told ready)."""
    lease = start_active(client, engine_tick, instances=2)
    token = probe_of(boots[0].user_data)[0].split('READINESS_TOKEN="${READINESS_TOKEN:-')[1].split("}")[0]
    url = f"/v1/leases/{lease['id']}/readiness"
    point = Held(lambda out, session, row, kind, message, now, actor: "VM 0" in message)
    monkeypatch.setattr(readiness, "record_event", point.around(readiness.record_event))

    def report(instance: int) -> int:
        return app.test_client().post(url, json={"instance": instance, "ok": True},
                                      headers={"X-Lease-Token": token}).status_code
    assert race(db_url, point, lambda: report(0), lambda: report(1)) == (200, 200)
    lease = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert lease["ready"] is True
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    assert sum(e["message"] == "every VM reported its GPUs ready" for e in events) == 1


def test_the_users_own_user_data_stays_beside_the_probe(client, engine_tick, boots):
    start_active(client, engine_tick, user_data="#cloud-config\npackages: [htop]\n")
    probe, types = probe_of(boots[0].user_data)
    assert types == ["text/plain", "text/x-shellscript"]
    assert "http://127.0.0.1:8779/v1/leases/" in probe and 'EXPECTED_GPUS="${EXPECTED_GPUS:-2}"' in probe
    assert "#cloud-config\npackages: [htop]\n" in [
        p.get_payload(decode=True).decode() for p in email.message_from_string(boots[0].user_data).walk()
        if p.get_content_type() == "text/plain"]


def test_a_lease_without_the_probe_keeps_its_user_data_and_is_ready_when_active(client, engine_tick, boots):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT2H", "user_data": "#!/bin/sh\n"},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    lease = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert boots[0].user_data == "#!/bin/sh\n"
    assert (lease["status"], lease["ready"], lease["readiness"]) == ("active", True, None)
    answer = client.post(f"/v1/leases/{lease['id']}/readiness", json={"instance": 0, "ok": True},
                         headers={"X-Lease-Token": "anything"})
    assert answer.status_code == 404   # a wrong secret: the lease does not exist for its sender


def test_reports_without_the_right_secret_or_for_no_vm_are_refused(client, engine_tick, boots):
    lease = start_active(client, engine_tick)
    token = probe_of(boots[0].user_data)[0].split('READINESS_TOKEN="${READINESS_TOKEN:-')[1].split("}")[0]
    url = f"/v1/leases/{lease['id']}/readiness"
    assert client.post(url, json={"instance": 0, "ok": True}).status_code == 401
    # a wrong secret is told what an unknown lease is, or a guessed secret tells which ids are leases
    wrong = client.post(url, json={"instance": 0, "ok": True}, headers={"X-Lease-Token": token + "x"})
    assert wrong.status_code == 404 and wrong.get_json()["errors"][0]["code"] == "gpu_tenancy.lease_not_found"
    # a member's Keystone identity is no secret of the lease either
    assert client.post(url, json={"instance": 0, "ok": True}, headers=headers()).status_code == 401
    assert client.post(url, json={"instance": 3, "ok": True},
                       headers={"X-Lease-Token": token}).status_code == 400
    assert client.post(url, json={"instance": 0}, headers={"X-Lease-Token": token}).status_code == 400
    assert client.post("/v1/leases/nope/readiness", json={"instance": 0, "ok": True},
                       headers={"X-Lease-Token": token}).status_code == 404
    assert client.get(url.rsplit("/", 1)[0], headers=headers()).get_json()["lease"]["ready"] is False


def test_the_probe_cannot_be_asked_for_when_the_service_has_no_readiness_url(client, runtime):
    runtime.config.readiness_url = None
    answer = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "readiness_probe": True},
                         headers=headers())
    assert answer.status_code == 400
    assert answer.get_json()["errors"][0]["code"] == "gpu_tenancy.readiness_unavailable"


def fake_gpus(tmp_path, count: int, working: bool):
    """A PCI device tree with `count` NVIDIA GPUs and an nvidia-smi that answers for them."""
    pci = tmp_path / "pci"
    for i in range(count):
        dev = pci / f"0000:8{i}:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
    nic = pci / "0000:01:00.0"
    nic.mkdir(parents=True)
    (nic / "vendor").write_text("0x8086\n")
    (nic / "class").write_text("0x020000\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    answer = 'echo "NVIDIA A100-SXM4-80GB, 81920 MiB, 31"' if working else 'echo "Unable to determine the device handle for GPU: Unknown Error"; exit 15'
    smi.write_text(f"#!/bin/sh\n{answer}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return pci, bin_dir


def guest_dirs(tmp_path) -> dict:
    """Where the probe installs the lease's commands, here, and no agent started."""
    return {"GT_ETC": str(tmp_path / "etc"), "GT_BIN": str(tmp_path / "guest-bin"), "AGENT_START": "no"}


@pytest.mark.parametrize("working", [True, False])
def test_the_real_probe_script_reports_to_the_service(app, client, engine_tick, boots, tmp_path, working):
    port = free_port(PORT_RANGE)
    app.extensions["gpu_tenancy"].config.readiness_url = f"http://127.0.0.1:{port}"
    lease = start_active(client, engine_tick)
    probe, _ = probe_of(boots[0].user_data)
    assert SCRIPT.read_text().count("@READINESS_URL@") == 1 and "@READINESS_URL@" not in probe
    script = tmp_path / "probe.sh"
    script.write_text(probe)
    pci, bin_dir = fake_gpus(tmp_path, 2, working)
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**os.environ, "PCI_DEVICES": str(pci), "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "WAIT_SECONDS": "0", **guest_dirs(tmp_path)}
        done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    lease = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    if working:
        assert lease["ready"] is True
        assert lease["readiness"]["instances"][0]["detail"] == "2 of 2 GPUs visible and usable"
    else:
        assert lease["ready"] is False
        assert lease["readiness"]["status"] == "failed"
        assert lease["readiness"]["instances"][0]["detail"] == (
            "expected 2 GPUs: 2 visible on PCI, 0 usable; nvidia-smi present")


def test_the_secret_is_shown_once_to_whoever_asked_for_the_lease(client, engine_tick, boots):
    created = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "readiness_probe": True},
                          headers=headers()).get_json()["lease"]
    token = created["readiness"]["token"]
    assert created["readiness"]["url"] == f"http://127.0.0.1:8779/v1/leases/{created['id']}/readiness"
    shown = client.get(f"/v1/leases/{created['id']}", headers=headers()).get_json()["lease"]
    assert "token" not in shown["readiness"]
    audit = client.get("/v1/audit", headers=headers(roles="admin")).get_json()["audit_records"]
    assert token not in str(audit)
    engine_tick()
    engine_tick(advance=30)
    assert token in boots[0].user_data or token in probe_of(boots[0].user_data)[0]
    answer = client.post(created["readiness"]["url"][len("http://127.0.0.1:8779"):], json={"instance": 0, "ok": True},
                         headers={"X-Lease-Token": token})
    assert answer.status_code == 200


@pytest.mark.parametrize("detail", ["2 of 2\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\", "ok\r\nforged line",
                                    "ok\x7f", "ok\x9b2J", "ok\u202egnp.exe", "ok\ufeff"])
def test_a_detail_with_a_control_character_is_refused_and_keeps_nothing(client, engine_tick, boots, detail):
    """A report's detail is kept on its VM and told in the lease's events, which the dashboard,
    the API's readers and the admin exports show as they are: printable text only, as a lease's
    name, refused in the OpenStack error format with nothing kept."""
    lease = start_active(client, engine_tick)
    token = probe_of(boots[0].user_data)[0].split('READINESS_TOKEN="${READINESS_TOKEN:-')[1].split("}")[0]
    url = f"/v1/leases/{lease['id']}/readiness"
    answer = client.post(url, json={"instance": 0, "ok": False, "detail": detail}, headers={"X-Lease-Token": token})
    assert answer.status_code == 400, answer.get_json()
    error = answer.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.invalid_input" and "detail" in error["detail"]
    lease = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert lease["readiness"]["instances"][0]["status"] == "waiting"
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    assert not any("GPU readiness" in e["message"] for e in events)
    assert client.post(url, json={"instance": 0, "ok": True, "detail": "2 of 2 GPUs – prêts"},
                       headers={"X-Lease-Token": token}).status_code == 200


def test_a_vm_that_reports_again_and_again_is_told_to_wait(client, runtime, engine_tick, boots):
    """Review 2. Each report is an event of up to 4 KiB on the lease. Before: a VM (anyone with the
    lease's secret) could report as fast as it could send, and every report added an event, without
    bound (the utilisation report is limited to one per VM every 30 s)."""
    lease = start_active(client, engine_tick)
    token = probe_of(boots[0].user_data)[0].split('READINESS_TOKEN="${READINESS_TOKEN:-')[1].split("}")[0]
    url = f"/v1/leases/{lease['id']}/readiness"
    body = {"instance": 0, "ok": True, "detail": "x" * 4096}
    answers = [client.post(url, json=body, headers={"X-Lease-Token": token}).status_code for _ in range(50)]
    assert answers[0] == 200 and set(answers[1:]) == {429}
    again = client.post(url, json=body, headers={"X-Lease-Token": token})
    assert again.status_code == 429 and int(again.headers["Retry-After"]) > 0
    runtime.clock.advance(readiness.MIN_SPACING)
    assert client.post(url, json=body, headers={"X-Lease-Token": token}).status_code == 200
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    assert sum("GPU readiness" in e["message"] for e in events) == 2

"""The deploy role against this machine (connection local, everything under a
test directory, start-stop-daemon instead of systemd): it installs this checkout
into a virtualenv, writes the config and the units, upgrades the database, and
starts the API and the engine; the deployed service answers, its engine leads,
and a second run changes nothing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests
from sqlalchemy import create_engine, inspect, text

from gpu_tenancy import __version__
from gpu_tenancy.config import Config
from tests.ansible.playbook import REPO, require_ansible, run_playbook
from tests.ports import free_port

PLAYBOOK = REPO / "tests" / "ansible" / "playbooks" / "deploy-local.yml"


def stop(pidfile):
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def deployed(tmp_path):
    require_ansible()
    if not subprocess.run(["which", "start-stop-daemon"], capture_output=True).returncode == 0:
        pytest.skip("no start-stop-daemon here")
    port = free_port(range(18820, 18850))
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True).stdout.strip()
    state = tmp_path / "var"
    wheels = tmp_path / "wheels"  # this checkout as a wheel, as a release would be
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    variables = {
        "deploy_package": f"gpu-tenancy=={__version__}", "deploy_pip_extra_args": f"--find-links {wheels}",
        "deploy_create_user": False, "deploy_user": user, "deploy_group": group,
        "deploy_systemd": False, "deploy_prefix": str(tmp_path / "opt"), "deploy_config_dir": str(tmp_path / "etc"),
        "deploy_state_dir": str(state), "deploy_unit_dir": str(tmp_path / "units"),
        "deploy_api_bind": f"127.0.0.1:{port}", "deploy_api_workers": 2,
        "deploy_extra_packages": ["gunicorn>=22,<24"],
        "deploy_config": {"auth_strategy": "noauth2", "cloud_driver": "simulated", "engine_tick_seconds": 1}}
    (tmp_path / "units").mkdir()
    yield variables, tmp_path, f"http://127.0.0.1:{port}"
    for name in ("gpu-tenancy-api", "gpu-tenancy-engine"):
        stop(state / "run" / f"{name}.pid")


def test_the_deployed_service_answers_and_a_second_run_changes_nothing(deployed):
    variables, tmp_path, url = deployed
    first = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, timeout=900)
    assert first.returncode == 0, first.output[-6000:]

    config_file = tmp_path / "etc" / "gpu-tenancy.yaml"
    config = Config.load(str(config_file))  # the service's own loader takes it
    assert (config.auth_strategy, config.cloud_driver, config.run_engine) == ("noauth2", "simulated", False)
    assert oct(config_file.stat().st_mode & 0o777) == "0o640"
    api_unit = (tmp_path / "units" / "gpu-tenancy-api.service").read_text()
    assert f"ExecStart={tmp_path}/opt/venv/bin/gunicorn --workers=2 --bind={url[7:]}" in api_unit
    assert f"Environment=GPU_TENANCY_CONFIG={config_file}" in api_unit
    engine_unit = (tmp_path / "units" / "gpu-tenancy-engine.service").read_text()
    assert f"bin/gpu-tenancy engine --config={config_file}" in engine_unit

    assert requests.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
    member = {"X-Project-Id": "p1", "X-User-Id": "u1", "X-Roles": "member"}
    assert requests.get(f"{url}/v1/leases", headers=member, timeout=10).json() == {"leases": []}
    db = create_engine(config.database_url)
    assert "readiness_probe" in {c["name"] for c in inspect(db).get_columns("leases")}  # at the head schema
    deadline = time.monotonic() + 60
    while True:  # the engine process takes the leader lock in the database
        with db.connect() as conn:
            holder = conn.execute(text("SELECT holder FROM locks WHERE name = 'engine'")).scalar()
        if holder or time.monotonic() > deadline:
            break
        time.sleep(1)
    db.dispose()
    assert holder, "the engine never took the leader lock"

    second = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, timeout=900)
    assert second.returncode == 0, second.output[-6000:]
    assert second.changed() == 0, second.output[-6000:]
    assert requests.get(f"{url}/healthz", timeout=10).status_code == 200

"""The deploy role against this machine (connection local, everything under a
test directory, start-stop-daemon instead of systemd): it installs this checkout
into a virtualenv, writes the config and the units, upgrades the database, and
starts the API and the engine; the deployed service answers over TLS only, its
engine leads, a second run changes nothing, and no secret of the config is
printed, not even under --diff."""
from __future__ import annotations

import datetime
import ipaddress
import os
import pwd
import signal
import stat
import subprocess
import sys
import time

import pytest
import requests
import yaml
from cryptography import x509
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import create_engine, inspect, text

from gpu_tenancy import __version__
from gpu_tenancy.config import Config
from tests.ansible.playbook import REPO, require_ansible, run_playbook
from tests.ports import free_port

PLAYBOOK = REPO / "tests" / "ansible" / "playbooks" / "deploy-local.yml"
PASSWORDS = ("first-Service-Pa55word", "second-Service-Pa55word")
SCRAPE_TOKEN = "scrape-token-0123456789abcdef"
TOKEN_KEY = Fernet.generate_key().decode()


def self_signed(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    directory.mkdir()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-tenancy test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    (directory / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(directory / "server.crt"), str(directory / "server.key")


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
    cert, key = self_signed(tmp_path / "tls")
    wheels = tmp_path / "wheels"  # this checkout as a wheel, as a release would be
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    variables = {
        "deploy_package": f"gpu-tenancy=={__version__}", "deploy_pip_extra_args": f"--find-links {wheels}",
        "deploy_create_user": False, "deploy_user": user, "deploy_group": group, "deploy_owner": user,
        "deploy_tls_cert": cert, "deploy_tls_key": key,
        "deploy_systemd": False, "deploy_prefix": str(tmp_path / "opt"), "deploy_config_dir": str(tmp_path / "etc"),
        "deploy_state_dir": str(state), "deploy_unit_dir": str(tmp_path / "units"),
        "deploy_api_bind": f"127.0.0.1:{port}", "deploy_api_workers": 2,
        "deploy_extra_packages": ["gunicorn>=23"],
        "deploy_clouds_yaml": {"gpu-tenancy": {"auth": {"auth_url": "https://keystone.example/v3",
                                                        "username": "gpu-tenancy", "password": PASSWORDS[0]}}},
        "deploy_config": {"auth_strategy": "noauth2", "allow_noauth2": True, "cloud_driver": "simulated",
                          "engine_tick_seconds": 1, "keystone_authtoken": {"password": PASSWORDS[0]},
                          "dashboard_token_keys": [TOKEN_KEY], "metrics_scrape_token": SCRAPE_TOKEN}}
    (tmp_path / "units").mkdir()
    yield variables, tmp_path, f"https://127.0.0.1:{port}", cert
    for name in ("gpu-tenancy-api", "gpu-tenancy-engine"):
        stop(state / "run" / f"{name}.pid")


def secrets_in(output: str) -> list[str]:
    return [s for s in (*PASSWORDS, SCRAPE_TOKEN, TOKEN_KEY) if s in output]


def writable_by_others(root) -> list[str]:
    """Files and directories under root that the group or anyone may write."""
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in [directory, *(os.path.join(directory, f) for f in files)]:
            mode = os.lstat(name).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o022:
                found.append(name)
    return found


def test_the_deployed_service_answers_and_a_second_run_changes_nothing(deployed):
    variables, tmp_path, url, cert = deployed
    first = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, timeout=900, args=("--diff",))
    assert first.returncode == 0, first.output[-6000:]
    assert secrets_in(first.output) == []

    config_file = tmp_path / "etc" / "gpu-tenancy.yaml"
    config = Config.load(str(config_file))  # the service's own loader takes it
    assert (config.auth_strategy, config.cloud_driver, config.run_engine) == ("noauth2", "simulated", False)
    assert oct(config_file.stat().st_mode & 0o777) == "0o640"
    owner = pwd.getpwnam(variables["deploy_owner"]).pw_uid
    for path in (config_file, config_file.parent, tmp_path / "opt" / "venv", tmp_path / "tls" / "server.key"):
        assert path.stat().st_uid == owner and not path.stat().st_mode & 0o022, path
    assert oct((tmp_path / "tls" / "server.key").stat().st_mode & 0o777) == "0o640"
    clouds_yaml = tmp_path / "etc" / "clouds.yaml"   # the service's cloud credentials, read by its group only
    assert yaml.safe_load(clouds_yaml.read_text()) == {"clouds": variables["deploy_clouds_yaml"]}
    assert oct(clouds_yaml.stat().st_mode & 0o777) == "0o640" and clouds_yaml.stat().st_uid == owner
    assert writable_by_others(tmp_path / "opt") == []
    api_unit = (tmp_path / "units" / "gpu-tenancy-api.service").read_text()
    assert (f"ExecStart={tmp_path}/opt/venv/bin/gunicorn --worker-class=gthread --workers=2 --threads=8 "
            "--timeout=60 --graceful-timeout=30 --keep-alive=5 --limit-request-line=8190 "
            f"--limit-request-fields=100 --limit-request-field_size=8190 --bind={url[8:]} --access-logfile=- "
            f"--certfile={cert} --keyfile={cert[:-3]}key gpu_tenancy.wsgi:application") in api_unit
    assert f"Environment=GPU_TENANCY_CONFIG={config_file}" in api_unit
    engine_unit = (tmp_path / "units" / "gpu-tenancy-engine.service").read_text()
    assert f"bin/gpu-tenancy engine --config={config_file}" in engine_unit

    assert requests.get(f"{url}/healthz", timeout=10, verify=cert).json() == {"status": "ok"}
    with pytest.raises(requests.ConnectionError):   # no plain HTTP on the port
        requests.get(f"http://{url[8:]}/healthz", timeout=10)
    member = {"X-Project-Id": "p1", "X-User-Id": "u1", "X-Roles": "member"}
    assert requests.get(f"{url}/v1/leases", headers=member, timeout=10, verify=cert).json() == {"leases": []}
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
    assert requests.get(f"{url}/healthz", timeout=10, verify=cert).status_code == 200

    # a new password: the config changes and the service restarts, and --diff shows neither password
    variables["deploy_config"]["keystone_authtoken"]["password"] = PASSWORDS[1]
    third = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, timeout=900, args=("--diff",))
    assert third.returncode == 0 and third.changed() >= 1, third.output[-6000:]
    assert secrets_in(third.output) == []
    assert PASSWORDS[1] in config_file.read_text()

    # a config that names a clouds.yaml the host does not have (and none given to write) stops the run
    variables["deploy_clouds_yaml"] = {}
    variables["deploy_config"]["cloud"] = {"options": {"clouds_yaml_file": str(tmp_path / "etc" / "missing.yaml")}}
    fourth = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, timeout=900)
    assert fourth.returncode != 0 and "missing.yaml, is not on the host" in fourth.output, fourth.output[-6000:]

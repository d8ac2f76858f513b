"""What the deploy role and the package promise about exposure, read from their
files (no ansible needed): TLS and threaded gunicorn workers with timeouts and
request bounds, code and config the service cannot change, secrets never
printed, and version floors past the known advisories."""
from __future__ import annotations

import configparser
import re

import yaml
from packaging.requirements import Requirement

from tests.ansible.playbook import ANSIBLE_DIR, REPO

ROLE = ANSIBLE_DIR / "roles" / "deploy"


def load(path: str):
    return yaml.safe_load((ROLE / path).read_text())


def tasks() -> list[dict]:
    return load("tasks/main.yml") + load("tasks/start_without_systemd.yml")


def test_the_api_runs_threaded_workers_with_timeouts_and_bounded_requests_over_tls():
    defaults, variables = load("defaults/main.yml"), load("vars/main.yml")
    command = variables["deploy_gunicorn_command"]
    for flag in ("--worker-class=gthread", "--threads=", "--timeout=", "--graceful-timeout=", "--keep-alive=",
                 "--limit-request-line=", "--limit-request-fields=", "--limit-request-field_size="):
        assert any(part.startswith(flag) for part in command), flag
    assert defaults["deploy_tls"] is True and defaults["deploy_api_bind"].startswith("127.0.0.1:")
    assert variables["deploy_gunicorn_tls"] == ["--certfile={{ deploy_tls_cert }}", "--keyfile={{ deploy_tls_key }}"]
    assert "deploy_gunicorn_tls if deploy_tls" in variables["deploy_services"]["gpu-tenancy-api"]["command"]
    assert defaults["deploy_health_url"].startswith("{{ 'https' if deploy_tls")


def test_the_example_inventory_serves_the_network_over_tls_only():
    example = yaml.safe_load((ANSIBLE_DIR / "inventory" / "example" / "group_vars" / "all.yml").read_text())
    public = not example.get("deploy_api_bind", "127.0.0.1:").startswith("127.0.0.1:")
    assert not public or example.get("deploy_tls", True) is True
    assert example["gpu_tenancy_url"].startswith("https://")


def test_code_and_config_belong_to_the_owner_not_to_the_service():
    assert load("defaults/main.yml")["deploy_owner"] == "root"
    by_name = {t["name"]: t for t in load("tasks/main.yml")}
    directories = {d["path"]: d["owner"] for d in by_name["Directories"]["loop"]}
    for path in ("{{ deploy_prefix }}", "{{ deploy_config_dir }}"):
        assert directories[path] == "{{ deploy_owner }}", path
    assert by_name["The config file"]["ansible.builtin.copy"]["owner"] == "{{ deploy_owner }}"
    assert by_name["The config file"]["ansible.builtin.copy"]["mode"] == "0640"
    pip = next(t for t in by_name.values() if "ansible.builtin.pip" in t)
    assert "become_user" not in pip               # installed as the owner, not as the service
    venv = next(t for t in by_name.values() if t.get("ansible.builtin.file", {}).get("path") == "{{ deploy_venv }}")
    assert venv["ansible.builtin.file"]["owner"] == "{{ deploy_owner }}" and venv["ansible.builtin.file"]["recurse"]


def test_every_task_that_handles_a_secret_prints_nothing():
    secret = re.compile(r"\b(deploy_effective_config|deploy_config|deploy_database_url|deploy_clouds_yaml|"
                        r"\w*password\w*)\b")
    handling = [t for t in tasks() if secret.search(yaml.safe_dump({k: v for k, v in t.items() if k != "name"}))]
    assert handling, "the config file task handles the secrets"
    for task in handling:
        assert task.get("no_log") is True and task.get("diff") is False, task["name"]


def requirement(lines: str, name: str) -> Requirement:
    for line in lines.strip().splitlines():
        if line.strip() and not line.strip().startswith("#") and Requirement(line.strip()).name.lower() == name:
            return Requirement(line.strip())
    raise AssertionError(f"{name} is not required")


def test_version_floors_exclude_the_releases_with_known_advisories():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    install = cfg["options"]["install_requires"]
    # (package, last vulnerable release, first fixed)
    for name, bad, good in (("requests", "2.32.3", "2.32.4"), ("werkzeug", "3.1.5", "3.1.6"),
                            ("flask", "3.1.0", "3.1.1")):
        spec = requirement(install, name).specifier
        assert bad not in spec and good in spec, name
    assert requirement(install, "cryptography").specifier
    for extra in ("test", "bench"):
        assert "22.2.0" not in requirement(cfg["options.extras_require"][extra], "gunicorn").specifier, extra
        assert "2.32.3" not in requirement(cfg["options.extras_require"][extra], "requests").specifier, extra
    role_gunicorn = requirement("\n".join(load("defaults/main.yml")["deploy_extra_packages"]), "gunicorn")
    assert "22.2.0" not in role_gunicorn.specifier and "23.0.0" in role_gunicorn.specifier

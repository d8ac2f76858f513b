"""The deploy role's retention timer (tasks/purge.yml), rendered on this machine with its units
under a test directory and nothing started: a daily oneshot `gpu-tenancy db purge
--older-than-days N` as the service's user, on by default; retention 0 takes an earlier timer
away; a retention the purge would refuse stops the run."""
from __future__ import annotations

import shlex

import pytest
import yaml

from tests.ansible.playbook import ANSIBLE_DIR, REPO, require_ansible, run_playbook

PLAYBOOK = REPO / "tests" / "ansible" / "playbooks" / "deploy-purge-local.yml"
DEFAULTS = yaml.safe_load((ANSIBLE_DIR / "roles" / "deploy" / "defaults" / "main.yml").read_text())


def unit(text: str, key: str) -> str:
    [value] = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]
    return value


@pytest.fixture
def role(tmp_path):
    require_ansible()
    (tmp_path / "units").mkdir()
    variables = {"deploy_systemd": False, "deploy_unit_dir": str(tmp_path / "units"),
                 "deploy_prefix": "/srv/gt", "deploy_config_file": "/srv/gt/etc/gpu-tenancy.yaml",
                 "deploy_state_dir": "/srv/gt/var", "deploy_user": "gt", "deploy_group": "gt"}

    def run(**changes):
        return run_playbook(PLAYBOOK, "localhost,", {**variables, **changes}, tmp_path, timeout=300)
    return run, tmp_path / "units"


def test_the_purge_is_on_by_default_with_a_retention_it_accepts():
    assert DEFAULTS["deploy_purge_older_than_days"] == 90 and DEFAULTS["deploy_purge_vacuum"] is False


def test_a_daily_oneshot_purge_runs_as_the_service_and_retention_0_takes_it_away(role):
    run, units = role
    first = run()
    assert first.returncode == 0, first.output[-4000:]
    service = (units / "gpu-tenancy-purge.service").read_text()
    assert shlex.split(unit(service, "ExecStart")) == [
        "/srv/gt/venv/bin/gpu-tenancy", "db", "purge", "--older-than-days=90", "--config=/srv/gt/etc/gpu-tenancy.yaml"]
    assert (unit(service, "Type"), unit(service, "User"), unit(service, "Group")) == ("oneshot", "gt", "gt")
    assert unit(service, "ReadWritePaths") == "/srv/gt/var"
    timer = (units / "gpu-tenancy-purge.timer").read_text()
    assert (unit(timer, "OnCalendar"), unit(timer, "Persistent"), unit(timer, "WantedBy")) == (
        "daily", "true", "timers.target")
    assert run().changed() == 0   # a second run changes nothing

    vacuum = run(deploy_purge_older_than_days=30, deploy_purge_vacuum=True)
    assert vacuum.returncode == 0, vacuum.output[-4000:]
    assert unit((units / "gpu-tenancy-purge.service").read_text(), "ExecStart").endswith(
        "db purge --older-than-days=30 --config=/srv/gt/etc/gpu-tenancy.yaml --vacuum")

    off = run(deploy_purge_older_than_days=0)
    assert off.returncode == 0, off.output[-4000:]
    assert sorted(p.name for p in units.iterdir()) == []


@pytest.mark.parametrize("days", ["-1", "ninety", "1.5"])
def test_a_retention_the_purge_would_refuse_stops_the_run(role, days):
    run, units = role
    done = run(deploy_purge_older_than_days=days)
    assert done.returncode != 0 and f"deploy_purge_older_than_days is {days}: give whole days" in done.output
    assert list(units.iterdir()) == []

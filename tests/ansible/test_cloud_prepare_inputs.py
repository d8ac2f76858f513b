"""The cloud_prepare role refuses what it cannot make right before it touches the cloud
(connection local, no cloud at all: a run that gets as far as a cloud call fails on that)."""
from __future__ import annotations

from tests.ansible.playbook import REPO, require_ansible, run_playbook

PLAYBOOK = REPO / "tests" / "ansible" / "playbooks" / "cloud-prepare-local.yml"


def test_no_service_password_is_refused_before_any_cloud_call(tmp_path):
    # the openstack.cloud module makes a user given an empty password with no password at all:
    # the run succeeded, and the service's every Keystone login failed afterwards
    require_ansible()
    run = run_playbook(PLAYBOOK, "localhost,", {"cloud_prepare_cloud": "nowhere"}, tmp_path)
    assert run.returncode != 0
    assert "cloud_prepare_service_password" in run.output, run.output[-3000:]
    assert "The service's project" not in run.output, run.output[-3000:]

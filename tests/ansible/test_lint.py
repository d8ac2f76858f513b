"""ansible/ passes ansible-lint (offline, the production profile) and
ansible-playbook's syntax check, with the example inventory."""
from __future__ import annotations

import json
import os
import re
import subprocess

import yaml

from tests.ansible.playbook import ANSIBLE_DIR, REPO, ansible_env, require_ansible, tool

PLAYBOOKS = [ANSIBLE_DIR / "site.yml", *sorted((REPO / "tests" / "ansible" / "playbooks").glob("*.yml"))]
INVENTORY = ANSIBLE_DIR / "inventory" / "example" / "hosts.yml"


def run(*argv, cwd=ANSIBLE_DIR):
    env = ansible_env(PATH=f"{tool('python').parent}{os.pathsep}{os.environ['PATH']}", NO_COLOR="1")
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_ansible_lint_passes_offline_with_the_production_profile():
    require_ansible()
    done = run(tool("ansible-lint"), "--offline", "site.yml", "roles", REPO / "tests" / "ansible" / "playbooks")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "Profile 'production' was required, and it passed" in output
    processed = int(re.search(r"in (\d+) files processed", output)[1])
    assert processed >= 25, output[-2000:]


def test_every_playbook_passes_the_syntax_check():
    require_ansible()
    for playbook in PLAYBOOKS:
        done = run(tool("ansible-playbook"), "--syntax-check", "-i", INVENTORY, playbook)
        assert done.returncode == 0, f"{playbook}: {done.stdout}{done.stderr}"


def test_the_example_inventory_has_every_group_the_site_playbook_targets():
    require_ansible()
    done = run(tool("ansible-inventory"), "-i", INVENTORY, "--list")
    assert done.returncode == 0, done.stderr
    groups = set(json.loads(done.stdout))
    targets = {play["hosts"] for play in yaml.safe_load((ANSIBLE_DIR / "site.yml").read_text())}
    assert targets == {"gpu_compute", "nova_scheduler", "cloud_admin", "gpu_tenancy"}
    assert targets <= groups

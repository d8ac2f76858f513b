"""Run ansible-playbook from the test venv, with the repo's ansible.cfg (and so
its roles and the openstack.cloud collection of scripts/ansible-collections)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
COLLECTION = ANSIBLE_DIR / "collections" / "ansible_collections" / "openstack" / "cloud"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def tool(name: str) -> Path:
    return Path(sys.executable).with_name(name)


def require_ansible() -> None:
    """Skip without ansible (the `ansible` extra) or the collection, except in CI."""
    missing = [str(p) for p in (tool("ansible-playbook"), COLLECTION / "MANIFEST.json") if not p.exists()]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but missing: {', '.join(missing)} (scripts/run-tests installs them)")
        pytest.skip(f"missing {', '.join(missing)}: pip install -e '.[ansible]' && scripts/ansible-collections")


def ansible_env(**extra: str) -> dict:
    # not the test run's PYTHONPATH: pip in the deployed virtualenv would take a checkout on it as installed
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**inherited, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": os.environ.get("TMPDIR", "/tmp"), **extra}


@dataclass
class Run:
    returncode: int
    output: str
    recap: dict[str, dict[str, int]]

    def changed(self, host: str = "localhost") -> int:
        return self.recap[host]["changed"]


def run_playbook(playbook: Path, inventory: str | Path, extra_vars: dict, tmp_path: Path,
                 env: dict | None = None, timeout: int = 600, args: tuple[str, ...] = ()) -> Run:
    vars_file = tmp_path / f"vars-{playbook.stem}.json"
    # the modules run with this Python unless the test names another
    vars_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra_vars}))
    done = subprocess.run([str(tool("ansible-playbook")), "-i", str(inventory), str(playbook),
                           "-e", f"@{vars_file}", *args], cwd=REPO, env=ansible_env(**(env or {})),
                          capture_output=True, text=True, timeout=timeout)
    recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
             for m in RECAP.findall(done.stdout)}
    return Run(done.returncode, done.stdout + done.stderr, recap)

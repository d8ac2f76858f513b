"""Run the real `openstack` command (python-openstackclient, from this venv) with
the gpu plugin, in an environment of its own: no OS_* of the caller's, no
clouds.yaml but the one a test names."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OPENSTACK = Path(sys.executable).with_name("openstack")


def require_openstack_client() -> None:
    """Skip without python-openstackclient (the `cli` extra); in CI it must be there."""
    if OPENSTACK.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {OPENSTACK} is missing: install the `cli` extra")
    pytest.skip("python-openstackclient is not installed (pip install -e '.[cli]')")


class OpenStackCLI:
    def __init__(self, home: Path, **env: str):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        self.env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), **env)
        self.home = home

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(OPENSTACK), *args], capture_output=True, text=True, timeout=timeout,
                              cwd=self.home, env={**self.env, **env})

    def json(self, *args: str, **env: str):
        """The command's -f json output; fails the test on a non-zero exit."""
        result = self.run(*args, "-f", "json", **env)
        assert result.returncode == 0, f"openstack {' '.join(args)}: rc {result.returncode}\n{result.stderr}"
        return json.loads(result.stdout)

    def popen(self, *args: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen([str(OPENSTACK), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=self.home, env={**self.env, **env})

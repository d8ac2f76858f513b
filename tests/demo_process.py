"""The demo (`gpu-tenancy demo`: noauth2, the simulated cloud, SQLite) as a real process
on a free loopback port, for the tests that drive it with real clients."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.process_group import process_group, stop


@contextlib.contextmanager
def demo_process(tmp: Path, **env: str) -> Iterator[str]:
    """The demo's base URL while it runs; `env`: GPU_TENANCY_* options for it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with process_group([sys.executable, "-m", "gpu_tenancy.cli", "demo", "--port", str(port),
                        "--db", f"sqlite:///{tmp / 'demo.db'}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp,
                       env={**os.environ, "PYTHONUNBUFFERED": "1", **env}) as proc:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the demo did not answer on /healthz")
                time.sleep(0.2)
        try:
            yield base
        finally:
            stop(proc, 30, "the demo")

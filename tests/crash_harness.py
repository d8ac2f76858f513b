"""Run `gpu-tenancy engine` in a process of its own, kill -9 it at a named step
(GPU_TENANCY_CRASH_AT), start another, and report what the lease and the cloud
look like once it is done. Used by the simulated and the loopback crash tests."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpu_tenancy.db import models as m
from gpu_tenancy.engine.crashpoints import ENV
from tests.process_group import kill_group

ENGINE_SETTINGS = dict(engine_tick_seconds=1, provisioning_poll_seconds=0.2, leader_lease_seconds=2,
                       host_refresh_seconds=60, warn_before_end_seconds=0)


@dataclass
class CrashOutcome:
    killed: bool
    final_status: str | None
    reached_active: bool
    engine_logs: list[str] = field(default_factory=list)


def write_config(tmp_path: Path, **values) -> Path:
    path = tmp_path / "gpu-tenancy.yaml"
    path.write_text(yaml.safe_dump({**ENGINE_SETTINGS, **values}))
    return path


def start_engine(config_path: Path, log_path: Path, crash_at: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != ENV and not k.startswith("GPU_TENANCY_")}
    if crash_at:
        env[ENV] = crash_at
    with open(log_path, "ab") as log:
        # a group of its own: stop() kills what is left of it, however the test ends
        return subprocess.Popen([sys.executable, "-m", "gpu_tenancy.cli", "engine", "--config", str(config_path)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)   # engine_stop_seconds (15) for a pass under way, then it leaves it
    kill_group(proc)


def lease_status(sessions, lease_id: str) -> str | None:
    with sessions() as s:
        row = s.get(m.Lease, lease_id)
        return row.status if row else None


def crash_then_restart(tmp_path: Path, config_path: Path, sessions, lease_id: str, step: str,
                       until: str = "ended", timeout: float = 90) -> CrashOutcome:
    """Engine 1 runs with the crash point set and must die of SIGKILL; engine 2 runs
    until the lease is `until` (or failed) and is then stopped."""
    logs = [tmp_path / "engine-1.log", tmp_path / "engine-2.log"]
    first = start_engine(config_path, logs[0], step)
    try:
        first.wait(timeout=timeout)
        killed = first.returncode == -signal.SIGKILL
    except subprocess.TimeoutExpired:
        killed = False   # the crash point never came
    finally:
        stop(first)
    second = start_engine(config_path, logs[1], None)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and lease_status(sessions, lease_id) not in (until, "failed"):
            time.sleep(0.3)
    finally:
        stop(second)
    with sessions() as s:
        row = s.get(m.Lease, lease_id)
        reached = any(e.to_state == "active" for e in s.query(m.Event).filter_by(lease_id=lease_id))
        status = row.status if row else None
    return CrashOutcome(killed, status, reached, [p.read_text()[-3000:] for p in logs if p.exists()])

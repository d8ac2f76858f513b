"""Long-running processes the tests start (the demo, the engine, gunicorn): each leads a process
group of its own, and the whole group is SIGKILLed when the test ends, however it ends. A service
that hangs on its SIGTERM then fails its test and leaks neither a process nor a port (the demo
once ran on two hours after a test's terminate() timed out)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def process_group(argv: list[str], **popen) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(argv, start_new_session=True, **popen)
    try:
        yield proc
    finally:
        kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of the group `proc` leads (nothing, after a clean stop)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def stop(proc: subprocess.Popen, timeout: float, what: str = "the service") -> tuple:
    """SIGTERM, then the output (communicate's) once it exits; not exited within `timeout` s,
    its group is killed and the test fails with what it printed."""
    proc.terminate()
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"{what} did not stop within {timeout:g} s of SIGTERM (its group killed):\n{out}\n{err}")

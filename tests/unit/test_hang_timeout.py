"""A test that hangs fails with its stack instead of holding CI until its 90 minutes are gone
(pytest-timeout, set in pyproject.toml)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_suite_runs_with_a_per_test_timeout(request):
    assert request.config.pluginmanager.has_plugin("timeout")
    seconds = float(request.config.getini("timeout"))
    # long enough for the slowest real test (minutes), short of CI's 90 minutes with room to spare
    assert 300 <= seconds <= 1800


def test_a_hung_test_fails_with_the_stack_of_where_it_waits(tmp_path):
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent("""
        import threading

        def test_waits_on_a_lock_never_released():
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
    """))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=2",
         "--rootdir", str(tmp_path), str(tmp_path / "test_hangs.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Timeout" in out and "lock.acquire()" in out, out

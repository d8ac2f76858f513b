"""bench/process_cpu.py counts the CPU of a process tree once each: live processes by their
own times, exited ones by the parent that waited for them (as PostgreSQL's backends and
autovacuum workers are, by the postmaster). bench/api_load.py splits each phase's CPU by it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

BENCH = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
sys.path.insert(0, BENCH)

from process_cpu import own_cpu, tree_cpu  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"
# a parent that runs a child burning 0.3 s to its end (waited for), then burns 0.2 s itself, then waits
TREE = ("import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(s=0.3)!r}], check=True)\n"
        + BURN.format(s=0.2) + "print('done', flush=True)\nsys.stdin.read()\n")


def test_a_tree_counts_its_live_processes_and_those_they_waited_for():
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "done"   # the child has exited; the parent is alive, idle
        used = tree_cpu(proc.pid)
        # both burns (0.5 s), and the two interpreters' start-up, counted; not much more
        assert 0.5 <= used < 0.5 + 2.0, used
        # the tree of this test's process holds that tree, besides its own CPU and its waited-for children's
        t = os.times()
        mine = t.user + t.system + t.children_user + t.children_system
        assert tree_cpu(os.getpid()) - mine >= used - 0.02
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_tree_of_a_process_that_is_gone_uses_nothing():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert tree_cpu(proc.pid) == 0.0


def test_own_cpu_grows_with_the_work_of_this_process():
    before = own_cpu()
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    assert own_cpu() - before >= 0.15   # counted in clock ticks: a tick or two may fall either side

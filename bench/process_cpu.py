"""CPU seconds used by a process and the processes it started, read from /proc (Linux): what
bench/api_load.py uses to split a phase's CPU between the client, the gunicorn workers and
PostgreSQL. Its req/s ratio says how far a create is from the bare INSERT; this says which
process the difference is in.

A process's CPU is counted once: while it runs, in its own utime and stime; once it has
exited and been waited for, in its parent's cutime and cstime. So summing all four over the
live processes of a tree counts everything the tree has used, exited PostgreSQL backends and
autovacuum workers included (the postmaster waits for them)."""
from __future__ import annotations

import os

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()   # after the command's name, which may hold spaces


def tree_cpu(root: int) -> float:
    """Seconds of CPU used by `root` and its descendants, live or waited for (NaN without /proc)."""
    if not os.path.isdir("/proc"):
        return float("nan")
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat(int(name))
        if fields is None:
            continue
        # fields[1] is the parent's pid; utime, stime, cutime, cstime are fields 14 to 17 of stat
        parent[int(name)] = int(fields[1])
        ticks[int(name)] = sum(int(v) for v in fields[11:15])
    total = 0
    for pid, t in ticks.items():
        p = pid
        while p not in (0, 1, root) and p in parent:
            p = parent[p]
        if p == root:
            total += t
    return total / TICK


def own_cpu() -> float:
    """Seconds of CPU used by this process alone (all its threads), not its children."""
    times = os.times()
    return times.user + times.system

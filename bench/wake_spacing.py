"""A member's create-then-cancel loop against the running engine, on a long queue: how many full
replans the engine runs and the CPU they take, and how long another project's create waits.
Prints figures, asserts nothing.

    python bench/wake_spacing.py                         # 100 hosts, 3,000 waiting, 20 s
    python bench/wake_spacing.py --waiting 3000 --seconds 20 --against HEAD~1

One process (as the demo runs: the engine's scheduler in its threads beside the API, Flask's test
client), SQLite, the simulated cloud: the database of bench/member_costs.py (--hosts whole-host
leases running for a day, --waiting leases queued behind them over 60 projects), planned by one
full replan and the running leases booted, untimed. Then the engine's scheduler is started (its
timer every `engine_tick_seconds`, 5 s) and, for --seconds of wall time:

  the loop   a member of bench-0 creates an 8-GPU lease for an hour (fitted into the plan: the
             queue is long) and cancels it (taken out of the plan), again and again; every
             request wakes the engine, as the API does
  the probe  every 0.25 s a member of bench-1 creates a lease (and cancels it, untimed): the
             seconds each create took, a replan under way holding the ledger lock (SQLite's
             write lock) and the process's CPU (Python's lock) meanwhile

Figures: loops a second, the engine's full replans (early_ends.replan, whichever tick ran it)
a second, the CPU seconds they took (the engine's thread, per wall second), and the probe's
create seconds (median, 95th percentile, most). With --against, the same run with a git ref's
code (in a child process, its own database) and the ratios new / ref.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SERVICE = os.environ.get("GT_BENCH_SERVICE", os.path.join(HERE, "..", "service"))
sys.path.insert(0, SERVICE)

from git_export import figures_of_ref  # noqa: E402
from member_costs import build  # noqa: E402

LOOP = {"X-Project-Id": "bench-0", "X-User-Id": "u-loop", "X-Roles": "member"}
PROBE = {"X-Project-Id": "bench-1", "X-User-Id": "u-probe", "X-Roles": "member"}
ASK = {"shape": "a100.x8", "duration": "1h"}


def boot_running(rt) -> None:
    """The replan's scheduled leases started and booted (virtual time), untimed: the engine's
    watch then has nothing to carry on during the run."""
    rt.engine.run_once()
    for _ in range(20):
        rt.clock.advance(60)
        rt.engine.lifecycle.watch()
        if not rt.engine.lifecycle.in_flight():
            return


def measure(n_hosts: int, waiting: int, seconds: float, interval: float | None) -> dict:
    from gpu_tenancy.engine import early_ends
    with tempfile.TemporaryDirectory() as workdir:
        app, rt = build(workdir, n_hosts, waiting, 0)
        if interval is not None and hasattr(rt.config, "engine_wake_min_interval_seconds"):
            rt.config.engine_wake_min_interval_seconds = interval
        boot_running(rt)
        replans: list[tuple[float, float]] = []   # (wall, engine thread CPU) of each
        real = early_ends.replan

        def counted(*args, **kwargs):
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                replans.append((time.perf_counter() - w0, time.thread_time() - c0))
        early_ends.replan = counted   # the lifecycle calls it by the module's name
        client, probe_client = app.test_client(), app.test_client()
        stop = threading.Event()
        probe_waits: list[float] = []

        def probe() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                made = probe_client.post("/v1/leases", json=ASK, headers=PROBE)
                probe_waits.append(time.perf_counter() - t)
                if made.status_code == 201:
                    probe_client.delete(f"/v1/leases/{made.get_json()['lease']['id']}", headers=PROBE)
                stop.wait(0.25)
        rt.engine.start()
        time.sleep(1.0)                      # the timer's first tick, untimed
        replans.clear()
        prober = threading.Thread(target=probe, daemon=True)
        loops, t0, c0 = 0, time.perf_counter(), time.process_time()
        prober.start()
        while time.perf_counter() - t0 < seconds:
            made = client.post("/v1/leases", json=ASK, headers=LOOP)
            assert made.status_code == 201, made.get_data(as_text=True)
            assert client.delete(f"/v1/leases/{made.get_json()['lease']['id']}", headers=LOOP).status_code == 204
            loops += 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        stop.set()
        prober.join()
        done = list(replans)
        rt.engine.stop()
        early_ends.replan = real
        rt.sessions.kw["bind"].dispose()
    waits = sorted(probe_waits)
    return {"wall": wall, "loops": loops, "replans": len(done),
            "replan_cpu": sum(c for _, c in done), "replan_wall": sum(w for w, _ in done),
            "process_cpu": cpu, "probes": len(waits),
            "probe_p50": statistics.median(waits) if waits else float("nan"),
            "probe_p95": waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else float("nan"),
            "probe_max": waits[-1] if waits else float("nan")}


ROWS = [("loops / s", lambda f: f["loops"] / f["wall"], "{:.1f}"),
        ("full replans / s", lambda f: f["replans"] / f["wall"], "{:.2f}"),
        ("replan CPU s / wall s", lambda f: f["replan_cpu"] / f["wall"], "{:.2f}"),
        ("replan CPU s (total)", lambda f: f["replan_cpu"], "{:.1f}"),
        ("replan wall s / wall s (ledger lock held)", lambda f: f["replan_wall"] / f["wall"], "{:.2f}"),
        ("process CPU s / wall s", lambda f: f["process_cpu"] / f["wall"], "{:.2f}"),
        ("other project's create: median s", lambda f: f["probe_p50"], "{:.3f}"),
        ("other project's create: p95 s", lambda f: f["probe_p95"], "{:.3f}"),
        ("other project's create: max s", lambda f: f["probe_max"], "{:.3f}")]


def table(new: dict, ref: dict | None, against: str | None) -> None:
    print("| figure | this tree |" + (f" {against} | ÷ ref |" if ref else ""))
    print("|---" * (2 + (2 if ref else 0)) + "|")
    for name, get, fmt in ROWS:
        row = f"| {name} | {fmt.format(get(new))} |"
        if ref:
            was = get(ref)
            row += f" {fmt.format(was)} | {get(new) / was if was else float('nan'):.2f} |"
        print(row)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--waiting", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, help="engine_wake_min_interval_seconds (where the code has it; "
                                                   "default: the config's)")
    ap.add_argument("--against", help="a git ref: the same run with its code, side by side")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON (for --against's child)")
    a = ap.parse_args(argv)
    if a.hosts < 1 or a.waiting < 1 or a.seconds <= 0:
        ap.error("--hosts and --waiting must be at least 1, --seconds above 0")
    ref = None
    if a.against:
        ref = figures_of_ref(a.against, __file__,
                             ["--json", "--hosts", str(a.hosts), "--waiting", str(a.waiting), "--seconds", str(a.seconds)])
    new = measure(a.hosts, a.waiting, a.seconds, a.interval)
    if a.json:
        print(json.dumps(new))
        return 0
    print(f"{a.hosts} hosts, {a.waiting} waiting, {new['wall']:.1f} s of create-then-cancel; "
          f"{new['probes']} probe creates" + (f"; ref: {a.against} ({ref['probes']} probe creates)" if ref else ""))
    table(new, ref, a.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())

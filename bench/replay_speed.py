"""Replay speed: the default planner (gpu-tenancy) through a whole trace, CPU time per run.

    export GT_TRACES_DIR=<directory of the trace CSVs>
    python bench/replay_speed.py                                  # philly-final at 80 % and 95 %
    python bench/replay_speed.py --loads 0.8 --days 7 --against HEAD~3
        # side by side with the bench and planner of a git ref: alternating fresh
        # processes, CPU time ratios, and whether both started every job at the same
        # time on the same hosts
    python bench/replay_speed.py --loads 0.8 --against HEAD~3 --together
        # the two at the same time, one per core: on a shared machine whose speed moves
        # between runs, the only ratio that held here

Each run is one process replaying the trace through the gpu-tenancy scheduler only
(bench/replay.py runs the baselines and writes the report; this measures the planner).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from git_export import export_ref

HERE = os.path.dirname(os.path.abspath(__file__))


def use_bench(bench_dir: str) -> None:
    """Put bench_dir and its service first on the path, before anything imports gpu_tenancy (this
    script's own `traces` does): once imported from this tree, a ref's planner was never run,
    and every --against compared this tree with itself (from 97ff4fd until this was found)."""
    sys.path[:0] = [bench_dir, os.path.join(bench_dir, "..", "service")]


def child(bench_dir: str, trace: str, load: float, days: float | None, overask: str | None, traces_dir: str) -> None:
    """One replay in this process with the bench (and its planner) of bench_dir; prints a JSON line."""
    import gpu_tenancy
    service = os.path.realpath(os.path.join(bench_dir, "..", "service"))
    if not os.path.realpath(gpu_tenancy.__file__).startswith(service + os.sep):
        raise SystemExit(f"the child replay runs {gpu_tenancy.__file__}, not the service of {bench_dir}")
    import yaml
    import replay
    try:   # the replay's core moved from bench/ into the service (gpu_tenancy.whatif)
        from gpu_tenancy.whatif.cluster_model import hosts_for_load, window_of
        from gpu_tenancy.whatif.event_loop import simulate
    except ImportError:   # a ref's own bench/ modules, from before the move (none in this tree)
        from cluster_model import hosts_for_load, window_of  # type: ignore[import-not-found, no-redef]
        from event_loop import simulate  # type: ignore[import-not-found, no-redef]
    cfg = yaml.safe_load(open(os.path.join(bench_dir, "replay.yaml")))
    jobs, shares = replay.load_jobs(cfg, trace, traces_dir, days, overask)
    n_hosts = hosts_for_load(jobs, load, window_of(jobs), cfg["host_gpus"])
    sched = replay.make("gpu-tenancy", cfg, shares, n_hosts * cfg["host_gpus"])
    c0, t0 = time.process_time(), time.perf_counter()
    out = simulate(jobs, n_hosts, sched)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    h = hashlib.sha256(repr((sorted((j, out.start[j], tuple(out.hosts[j])) for j in out.start),
                             sorted((out.first_eta or {}).items()))).encode())   # starts, hosts and told ETAs
    print(json.dumps({"cpu": cpu, "wall": wall, "jobs": len(jobs), "hosts": n_hosts,
                      "plans": out.extra.get("plans"), "digest": h.hexdigest()[:16]}))


def child_cmd(bench_dir: str, a: argparse.Namespace, load: float) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--child", bench_dir, "--trace", a.trace,
            "--loads", str(load), "--traces", a.traces] + (["--days", str(a.days)] if a.days else []) + \
           (["--overask", a.overask] if a.overask else [])


def run_children(dirs: list[str], a: argparse.Namespace, load: float) -> list[dict]:
    """One child per bench directory, all at once (each on its own core: the machine's speed then
    moves for all of them alike, where one after the other it moved by 1.3x here)."""
    procs = [subprocess.Popen(child_cmd(d, a, load), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d in dirs]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        if p.returncode:
            raise subprocess.CalledProcessError(p.returncode, p.args, stdout, stderr)
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def parser() -> argparse.ArgumentParser:
    import traces
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="philly-final")
    ap.add_argument("--loads", default="0.8,0.95", help="offered loads, e.g. 0.8,0.95")
    ap.add_argument("--days", type=float, help="only the first DAYS days of submissions")
    ap.add_argument("--overask", nargs="?", const="hour", choices=("hour", "2x"),
                    help="durations over-asked as replay.py's: to the next hour, or 2x (twice, to the hour)")
    ap.add_argument("--traces", default=traces.default_trace_dir(), help=f"default ${traces.TRACES_ENV}")
    ap.add_argument("--against", metavar="REF", help="side by side with the bench and planner of this git ref")
    ap.add_argument("--runs", type=int, default=1, help="alternating runs each (median CPU time)")
    ap.add_argument("--together", action="store_true",
                    help="with --against: run the two at the same time (needs two free cores)")
    ap.add_argument("--child", metavar="BENCH_DIR", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    import traces
    ap = parser()
    a = ap.parse_args(argv)
    if not a.traces:
        ap.error(f"give --traces or set {traces.TRACES_ENV} to the directory of the trace CSVs")
    loads = [float(x) for x in a.loads.split(",")]
    if a.child:
        child(a.child, a.trace, loads[0], a.days, a.overask, a.traces)
        return 0
    what = f"{a.trace}{f' first {a.days:g} days' if a.days else ''}{f' overask {a.overask}' if a.overask else ''}"
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(export_ref(a.against, tmp), "bench") if a.against else None
        print(f"replay of {what} through gpu-tenancy, CPU seconds per run"
              + (f"; this tree (new) against {a.against} (old), {a.runs} "
                 f"{'run(s) at the same time' if a.together else 'alternating run(s)'} each" if old else ""))
        print(f"{'load':>5} {'jobs':>6} {'hosts':>5} {'plans':>6} {'new cpu s':>9} {'new wall s':>10}"
              + (f" {'old cpu s':>9} {'new/old':>7} {'same':>5}" if old else ""), flush=True)
        for load in loads:
            got: dict[str, list[dict]] = {"new": [], "old": []}
            for r in range(a.runs):
                order = [("new", HERE)] + ([("old", old)] if old else [])
                if a.together:
                    for (name, _d), res in zip(order, run_children([d for _n, d in order], a, load)):
                        got[name].append(res)
                    continue
                for name, d in (order if r % 2 == 0 else order[::-1]):
                    got[name].append(run_children([d], a, load)[0])
            n = got["new"][0]
            nc = statistics.median(x["cpu"] for x in got["new"])
            nw = statistics.median(x["wall"] for x in got["new"])
            line = f"{load:>5.2f} {n['jobs']:>6} {n['hosts']:>5} {n['plans']:>6} {nc:>9.1f} {nw:>10.1f}"
            if old:
                oc = statistics.median(x["cpu"] for x in got["old"])
                same = len({x["digest"] for x in got["new"] + got["old"]}) == 1
                line += f" {oc:>9.1f} {nc / oc:>7.2f} {'yes' if same else 'NO':>5}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv[:-1]:
        use_bench(sys.argv[sys.argv.index("--child") + 1])
    else:
        sys.path.insert(0, HERE)
    sys.exit(main())

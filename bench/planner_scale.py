"""Planner scale benchmark: prints figures, asserts nothing.

    python bench/planner_scale.py            # 100..2k hosts x 1k..20k waiting, growth rates
    python bench/planner_scale.py --check    # also compare with the naive planner on small sizes
    python bench/planner_scale.py --quick    # smaller sizes
    python bench/planner_scale.py --hosts 1000 --waiting 10000 --runs 3
    python bench/planner_scale.py --hosts 1000 --waiting 10000 --runs 5 --against main
        # side by side with the planner of a git ref: alternating runs, CPU time
        # ratios, and whether both planned every lease the same

Workload (seeded): hosts of 8 GPUs (90 % A100, 10 % H100, aggregates of 20),
current holds filling about 60 % of the cluster for minutes to days, waiting
leases of 1/2/4/8 GPUs per VM (2 % gangs of 2-4 VMs), durations log-uniform
from 10 minutes to 3 days, 85 % starting now and the rest up to 2 days ahead,
some of higher priority, 60 projects with mixed quotas and fair-share usage.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the code under test: this tree's, or (side by side) another ref's export
SERVICE_ENV = "PLANNER_SCALE_SERVICE"
sys.path.insert(0, os.environ.get(SERVICE_ENV) or os.path.join(HERE, "..", "service"))

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit  # noqa: E402
from gpu_tenancy.domain.planner import plan  # noqa: E402
from git_export import export_ref  # noqa: E402

NOW = 1_800_000_000
REPLAN_GOALS = {(1000, 10000): 0.2, (2000, 20000): 0.5}   # (hosts, waiting): most CPU seconds for one plan


def workload(n_hosts: int, n_waiting: int, seed: int = 1, fill: float = 0.6):
    rng = random.Random(seed * 1_000_003 + n_hosts * 7 + n_waiting)
    hosts = []
    for i in range(n_hosts):
        model = "H100" if i % 10 == 9 else "A100"
        hosts.append(Host(f"h{i:05d}", model, 8, enabled=(i % 97 != 5), aggregate=f"agg{i // 20:03d}"))
    projects = [f"p{j:02d}" for j in range(60)]
    holds = []
    k = 0
    for h in hosts:
        used = 0
        target = round(8 * fill + rng.uniform(-3, 3))
        while used < target:
            g = rng.choice([1, 1, 2, 4, 8])
            if used + g > 8:
                g = 8 - used
            start = NOW - rng.randint(0, 86400)
            end = NOW + int(math.exp(rng.uniform(math.log(300), math.log(3 * 86400))))
            holds.append(Hold(f"held{k}", rng.choice(projects), h.name, h.gpu_model, g, start, end))
            k += 1
            used += g
    quotas = {}
    for j, p in enumerate(projects):
        for m in ("A100", "H100"):
            nominal = 64 if j % 5 == 0 else 2000
            quotas[(p, m)] = QuotaLimit(p, m, nominal, borrow_gpus=16 if j % 5 == 0 else 0,
                                        max_duration=None if j % 7 else 5 * 86400, weight=1.0 + (j % 3))
    usage = {(p, m): rng.uniform(0, 5000) for p in projects for m in ("A100", "H100")}
    waiting = []
    for i in range(n_waiting):
        g = rng.choices([1, 2, 4, 8], weights=[40, 25, 20, 15])[0]
        inst = rng.randint(2, 4) if rng.random() < 0.02 else 1
        dur = int(math.exp(rng.uniform(math.log(600), math.log(3 * 86400))))
        es = NOW if rng.random() < 0.85 else NOW + rng.randint(0, 2 * 86400)
        ls = es + rng.randint(3600, 86400 * 10) if rng.random() < 0.1 else None
        waiting.append(LeaseRequest(
            f"l{i:06d}", rng.choice(projects), "H100" if rng.random() < 0.1 else "A100", g, inst, dur,
            es, ls, NOW - rng.randint(0, 7 * 86400), priority=1 if rng.random() < 0.05 else 0))
    return hosts, holds, quotas, waiting, usage


def time_plan(n_hosts, n_waiting, runs, backend=None):
    """(median wall s, the last plan, median CPU s) of `runs` plans."""
    hosts, holds, quotas, waiting, usage = workload(n_hosts, n_waiting)
    kw = {"_backend": backend} if backend is not None else {}
    times, cpu = [], []
    result = None
    for _ in range(runs):
        result = None   # free the previous plan outside the timed part
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(NOW, hosts, holds, quotas, waiting, usage, **kw)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), result, statistics.median(cpu)


def plan_digest(result) -> str:
    """A fingerprint of every lease's placement and reasons: equal digests,
    identical plans."""
    h = hashlib.sha256()
    for lid in sorted(result.leases):
        pl = result.leases[lid]
        h.update(repr((lid, pl.position, pl.placement, pl.borrowing,
                       [(r.code, r.message) for r in pl.reasons])).encode())
    return h.hexdigest()[:16]


def child(n_hosts: int, n_waiting: int) -> None:
    """One timed plan() in a fresh process; prints a JSON line."""
    wall, res, cpu = time_plan(n_hosts, n_waiting, 1)
    print(json.dumps({"wall": wall, "cpu": cpu, "digest": plan_digest(res)}))


def run_child(service_dir: str, n_hosts: int, n_waiting: int) -> dict:
    env = dict(os.environ, **{SERVICE_ENV: os.path.abspath(service_dir)})
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--hosts", str(n_hosts),
                          "--waiting", str(n_waiting)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def side_by_side(ref: str, host_counts, sizes, runs: int) -> None:
    """This tree against `ref`, alternating fresh processes (ABBA order) so a
    neighbour's load falls on both alike; ratios of median CPU time."""
    here = os.path.join(HERE, "..", "service")
    print(f"side by side: this tree (new) against {ref} (old), {runs} alternating run(s) each")
    print(machine())
    print(f"{'hosts':>6} {'waiting':>8} {'old cpu s':>10} {'new cpu s':>10} {'new/old':>8} "
          f"{'new wall s':>10} {'same plan':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(export_ref(ref, tmp, ("service",)), "service")
        for nh in host_counts:
            for nw in sizes:
                got: dict[str, list[dict]] = {"old": [], "new": []}
                for r in range(runs):
                    order = [("old", old), ("new", here)]
                    for name, d in (order if r % 2 == 0 else order[::-1]):
                        got[name].append(run_child(d, nh, nw))
                oc = statistics.median(x["cpu"] for x in got["old"])
                nc = statistics.median(x["cpu"] for x in got["new"])
                nwall = statistics.median(x["wall"] for x in got["new"])
                same = {x["digest"] for x in got["old"] + got["new"]}
                print(f"{nh:>6} {nw:>8} {oc:>10.3f} {nc:>10.3f} {nc / oc:>8.2f} {nwall:>10.3f} "
                      f"{'yes' if len(same) == 1 else 'NO':>9}", flush=True)


def machine() -> str:
    """One line naming the machine, so the figures can be read later."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"machine: {os.cpu_count()} cores, {model}; "
            f"{sys.implementation.name} {sys.version.split()[0]} ({platform.system()} {platform.machine()})")


def growth_exponent(xs, ys) -> float:
    """k in t ~ n^k: the least-squares slope of log t against log n."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1, help="median of this many runs per size")
    ap.add_argument("--hosts", type=ints, default=[100, 500, 1000, 2000], help="host counts, e.g. 100,1000")
    ap.add_argument("--waiting", type=ints, default=[1000, 5000, 10000, 20000], help="waiting counts")
    ap.add_argument("--quick", action="store_true", help="100 and 1,000 hosts x 1k and 5k waiting")
    ap.add_argument("--check", action="store_true",
                    help="also run the naive reference on small sizes and compare placements")
    ap.add_argument("--naive-max", type=int, default=200,
                    help="largest waiting count for the naive baseline (it is slow)")
    ap.add_argument("--against", metavar="REF",
                    help="side by side with the planner of this git ref (e.g. main); CPU time ratios")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    runs = a.runs
    host_counts, sizes = ([100, 1000], [1000, 5000]) if a.quick else (a.hosts, a.waiting)
    if a.child:
        return child(host_counts[0], sizes[0])
    if a.against:
        return side_by_side(a.against, host_counts, sizes, runs)

    print(f"planner plan() time, median of {runs} run(s)")
    print(machine())
    print("plan s is wall time; cpu s is this process's CPU time (less sensitive to a busy machine)")
    print(f"{'hosts':>6} {'waiting':>8} {'plan s':>9} {'cpu s':>9} {'us/lease':>9} {'placed':>7} {'start now':>9}")
    table, cpu = {}, {}
    for nh in host_counts:
        for nw in sizes:
            t, res, c = time_plan(nh, nw, runs)
            table[(nh, nw)] = t
            cpu[(nh, nw)] = c
            placed = sum(1 for p in res.leases.values() if p.placement)
            now_ = len(res.startable())
            print(f"{nh:>6} {nw:>8} {t:>9.3f} {c:>9.3f} {t / nw * 1e6:>9.1f} {placed:>7} "
                  f"{now_:>9}", flush=True)
    # growth rates from CPU time: on a shared machine the wall time mostly measures the neighbours
    if len(sizes) > 1:
        for nh in host_counts:
            k = growth_exponent(sizes, [cpu[(nh, nw)] for nw in sizes])
            print(f"growth in waiting leases at {nh} hosts: cpu ~ n^{k:.2f} "
                  f"({sizes[-1]}/{sizes[0]} leases: x{cpu[(nh, sizes[-1])] / cpu[(nh, sizes[0])]:.1f})")
    if len(host_counts) > 1:
        for nw in sizes:
            k = growth_exponent(host_counts, [cpu[(nh, nw)] for nh in host_counts])
            print(f"growth in hosts at {nw} waiting: cpu ~ h^{k:.2f} "
                  f"({host_counts[-1]}/{host_counts[0]} hosts: x{cpu[(host_counts[-1], nw)] / cpu[(host_counts[0], nw)]:.1f})")
    # issue 18's replan goals, on CPU time (the wall time on a shared machine is the neighbours')
    for (nh, nw), most in REPLAN_GOALS.items():
        if (nh, nw) in cpu:
            c = cpu[(nh, nw)]
            print(f"goal: {nw // 1000}k waiting on {nh // 1000}k hosts within {most} s of CPU: {c:.3f} s: "
                  f"{'met' if c <= most else 'NOT met'}")

    # baseline: the naive reference on small sizes, same run
    from naive_planner import NAIVE
    print()
    print("baseline: naive reference planner (every host at every candidate time)")
    print(f"{'hosts':>6} {'waiting':>8} {'naive s':>9} {'fast s':>9} {'ratio':>8} {'same':>6}")
    for nh, nw in [(20, 50), (50, 100), (100, a.naive_max)]:
        tn, rn, _ = time_plan(nh, nw, 1, backend=NAIVE)
        tf, rf, _ = time_plan(nh, nw, 3)
        same = all(rn.leases[k].placement == rf.leases[k].placement for k in rf.leases)
        print(f"{nh:>6} {nw:>8} {tn:>9.3f} {tf:>9.4f} {tn / tf:>7.0f}x {str(same):>6}")
        if a.check and not same:
            diff = [k for k in rf.leases if rn.leases[k].placement != rf.leases[k].placement]
            print(f"  differences: {len(diff)}, first {diff[0]}: naive {rn.leases[diff[0]].placement}"
                  f" fast {rf.leases[diff[0]].placement}")


if __name__ == "__main__":
    main()

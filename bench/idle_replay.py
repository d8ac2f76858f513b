"""GPUs held but idle, on a trace: a seeded share of the leases keep their GPUs idle after
their real run until the end they asked for; side by side, no idle rule (the idle tails
are held) and idle rules `end after X idle minutes` (the lease ends at its real end + X,
at most its asked end). The rest end at their real end (`gpu-done`). The planner plans
with the asked durations in every run. The model: gpu_tenancy/whatif/idle.py.

    export GT_TRACES_DIR=<directory of the trace CSVs>
    python bench/idle_replay.py --trace philly-final --load 0.8 --hosts 43 --overask 2x --rules 30,60
    python bench/idle_replay.py --trace philly-oct --days 7 --load 0.8 --procs 3   # tuning slice

The load is the offered load of the real work (as bench/replay.py sizes it): the idle
tails come on top. Prints, per run, P50/P90 wait, >=8-GPU P90 and mean wait, the
GPU-hours held idle and returned, the ratios to the run without a rule, and wall times;
writes bench/results/idle-<trace>-<load>-<overask>[-<days>d].md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))

import yaml  # noqa: E402

import traces  # noqa: E402
from gpu_tenancy.domain.gpu_activity import IdleRule  # noqa: E402
from gpu_tenancy.whatif.cluster_model import offered_load, window_of  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from gpu_tenancy.whatif.idle import end_rule, idle_hours, idle_share, with_idle  # noqa: E402
from gpu_tenancy.whatif.planner_sched import GpuTenancy, quota_limits  # noqa: E402
from metrics import summarize  # noqa: E402
from replay import OVERASK, trace_on_cluster  # noqa: E402
from report import hms  # noqa: E402

ASKED = {"hour": "the run time rounded up to the hour", "2x": "twice the run time rounded up to the hour, at most 7 days"}
NO_IDLE = "nobody idle"   # the optional reference run: every lease ends at its real end


def label(minutes: int | None) -> str:
    return "no rule" if minutes is None else f"end after {minutes} min"


def run_one(args: tuple) -> dict:
    """One replay: the jobs (real run times) held as the rule says, through the default planner."""
    name, jobs, idle, rule, n_hosts, cfg, shares, progress = args
    held = jobs if idle is None else with_idle(jobs, idle, rule)
    cap = n_hosts * cfg["host_gpus"]
    sched = GpuTenancy(quota_limits(shares, cap, "open"), cfg["fairshare_half_life_seconds"], name)
    sched.first_eta = None   # the waits only: no plans made only to tell ETAs (the same starts)
    t = time.perf_counter()
    out = simulate(held, n_hosts, sched, progress=progress)
    r = summarize(out, held, shares, cap)
    keep = ("p50", "p90", "big_p90", "mean", "use", "n", "n_big")
    return {"name": name, **{k: r[k] for k in keep}, "wall_s": time.perf_counter() - t,
            "hours": None if idle is None else idle_hours(jobs, idle, rule)}


def ratio(a: float, b: float) -> str:
    return "–" if not b else f"{a / b:.2f}"


def table(rows: list[dict]) -> str:
    base = next((r for r in rows if r["name"] == label(None)), rows[0])
    head = ("| run | GPU-h held idle | GPU-h returned | P50 | P90 | ≥8 GPUs P90 | mean | "
            "P50, P90, ≥8 P90, mean ×no rule | GPUs allocated | wall |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        h = r["hours"]
        lines.append(
            f"| {r['name']} | {'0' if h is None else f'{h.still_idle:,.0f}'} | "
            f"{'–' if h is None else f'{h.returned:,.0f} ({100 * h.returned / h.held_idle:.0f} %)' if h.held_idle else '0'} | "
            f"{hms(r['p50'])} | {hms(r['p90'])} | {hms(r['big_p90'])} | {hms(r['mean'])} | "
            f"{ratio(r['p50'], base['p50'])}, {ratio(r['p90'], base['p90'])}, "
            f"{ratio(r['big_p90'], base['big_p90'])}, {ratio(r['mean'], base['mean'])} | "
            f"{100 * r['use']:.1f} % | {r['wall_s']:.0f} s |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="philly-final")
    ap.add_argument("--load", type=float, default=0.8, help="offered load of the real work")
    ap.add_argument("--hosts", type=int, help="this many hosts, the arrivals' spacing scaled to make --load")
    ap.add_argument("--days", type=float, help="only the first DAYS days of submissions")
    ap.add_argument("--overask", default="2x", choices=OVERASK,
                    help="the asked duration: 'hour' the run time rounded up to the hour, '2x' twice it "
                         "rounded up to the hour, at most 7 days (default)")
    ap.add_argument("--idle-share", type=float, default=0.3,
                    help="the share of leases idle after their run (1: nobody calls gpu-done)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rules", default="30,60", help="idle rules to compare: end after these idle minutes")
    ap.add_argument("--reference", action="store_true", help=f"also a run where {NO_IDLE} (everyone gpu-done)")
    ap.add_argument("--procs", type=int, default=1, help="runs in parallel processes")
    ap.add_argument("--traces", default=traces.default_trace_dir(),
                    help=f"directory of the trace CSVs (default ${traces.TRACES_ENV})")
    ap.add_argument("--config", default=os.path.join(HERE, "replay.yaml"))
    ap.add_argument("--progress", type=float, default=120)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    if not a.traces:
        ap.error(f"give --traces or set {traces.TRACES_ENV} to the directory of the trace CSVs")
    wall0 = time.perf_counter()
    cfg = yaml.safe_load(open(a.config))
    jobs, shares, n_hosts, _ = trace_on_cluster(cfg, a)
    win = window_of(jobs)
    cap = n_hosts * cfg["host_gpus"]
    idle = idle_share([j.jid for j in jobs], a.idle_share, a.seed)
    rules: list[tuple[int | None, IdleRule | None]] = [(None, None)]
    rules += [(m, end_rule(m)) for m in (int(x) for x in a.rules.split(",") if x)]
    which = "whole set" if not a.days else f"first {a.days:g} days"
    head = (f"trace {a.trace} ({which}): {len(jobs)} leases, {len(idle)} idle after their run "
            f"({100 * a.idle_share:g} %, seed {a.seed}); {n_hosts} hosts x {cfg['host_gpus']} = {cap} GPUs; "
            f"offered load of the real work {100 * offered_load(jobs, cap, win):.1f} %; asked durations "
            f"{ASKED[a.overask]}")
    print(head, flush=True)
    work: list[tuple] = [(label(m), jobs, idle, r, n_hosts, cfg, shares, a.progress) for m, r in rules]
    if a.reference:
        work.append((NO_IDLE, jobs, None, None, n_hosts, cfg, shares, a.progress))
    if a.procs > 1:
        with ProcessPoolExecutor(a.procs) as pool:
            rows = list(pool.map(run_one, work))
    else:
        rows = []
        for w in work:
            rows.append(run_one(w))
            print(f"  {rows[-1]['name']}: {rows[-1]['wall_s']:.0f} s wall", flush=True)
    text = (f"{head}\n\n{table(rows)}\n\nwall time {time.perf_counter() - wall0:.0f} s in all "
            f"({a.procs} process{'es' if a.procs > 1 else ''})\n")
    os.makedirs(a.out, exist_ok=True)
    tag = f"idle-{a.trace}-{int(round(a.load * 100))}-{a.overask}" + (f"-{a.days:g}d" if a.days else "")
    with open(os.path.join(a.out, tag + ".md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

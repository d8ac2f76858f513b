"""Trace replay: one trace, one cluster, every scheduler, on virtual time.

    export GT_TRACES_DIR=<directory of the trace CSVs>   # or --traces DIR
    python bench/replay.py --trace philly-final --load 0.8
    python bench/replay.py --trace openb --load 0.95 --overask
    python bench/replay.py --trace philly-oct --load 0.8 --overask 2x
    python bench/replay.py --trace philly-oct --load 0.95 --days 7

Jobs become leases (tenant = Philly VC or openb qos; GPUs; duration = run
time, known exactly, or with --overask the next whole hour, or with
--overask 2x twice the run time rounded up to the hour (at most 7 days), the
lease then being cancelled at the real end). The cluster is hosts of 8 GPUs, as many as
make the offered load (GPU-time asked inside the submission window / (GPUs x
window)) equal --load; or a fixed number of hosts (--hosts, or `hosts:` in
replay.yaml) with the arrivals' spacing scaled to make that load.
gpu-tenancy is the service's planner with the engine's semantics
(gpu_tenancy/whatif/planner_sched.py); the baselines are in baselines.py; the mean-wait lower
bound in lower_bound.py. ETA honesty (for the jobs that waited, their ETA
at submission against their real start) is in metrics.eta_figures; n/a for
a scheduler that tells no ETA. Writes bench/results/<trace>-<load>[-overask|-overask2x].md
and PNG plots there.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))
REPO = os.path.dirname(HERE)

import yaml  # noqa: E402

import traces  # noqa: E402
from baselines import EASY, FIFO, RefuseRetry  # noqa: E402
from gpu_tenancy.whatif.cluster_model import hosts_for_load, offered_load, quota_shares, window_of  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from lower_bound import mean_wait_bound  # noqa: E402
from metrics import summarize  # noqa: E402
from gpu_tenancy.whatif.planner_sched import GpuTenancy, PlannerSettings, quota_limits  # noqa: E402
from report import hms, plots, table  # noqa: E402

# gpu-tenancy is the service's default planner; gpu-tenancy-bound the same with the wait bound of
# replay.yaml (planner_wait_bound_seconds), for comparison; see make()
SCHEDULERS = ("gpu-tenancy", "gpu-tenancy+quota", "gpu-tenancy-bound", "EASY", "FIFO", "refuse+retry")


WEEK = 7 * 86400


def over_asked(runtime: int, model: str) -> int:
    """The duration a lease asks for a job of `runtime` seconds: 'hour', the run time rounded
    up to the hour; '2x', twice it rounded up to the hour, at most a week (but never less
    than the hour-rounded run time: the lease must cover the job; Philly has few such)."""
    hour = -(-runtime // 3600) * 3600
    if model == "hour":
        return hour
    if model == "2x":
        return max(hour, min(WEEK, -(-2 * runtime // 3600) * 3600))
    raise ValueError(model)


def load_jobs(cfg: dict, trace: str, traces_dir: str, days: float | None, overask: str | None):
    spec = cfg["traces"][trace]
    path = os.path.join(traces_dir, spec["file"])
    if spec["kind"] == "philly":
        jobs = traces.read_philly(path, spec.get("start"), spec.get("end"))
        sizes = traces.read_vc_nodes(os.path.join(traces_dir, cfg["philly_vc_sizes"]))
    else:
        jobs = traces.read_openb(path, spec.get("max_runtime"))
        sizes = {}
    if days:
        cut = jobs[0].arrival + int(days * 86400)
        jobs = [j for j in jobs if j.arrival < cut]
    if not sizes:   # shares by GPU-time submitted
        for j in jobs:
            sizes[j.tenant] = sizes.get(j.tenant, 0) + j.gpu_time
    if overask:
        jobs = [dataclasses.replace(j, asked=over_asked(j.runtime, overask)) for j in jobs]
    return jobs, quota_shares((j.tenant for j in jobs), sizes)


def compress_to_load(jobs, load: float, n_gpus: int):
    """Scale the gaps between arrivals so that the offered load on n_gpus is
    `load` (run times unchanged); returns the jobs and the factor applied."""
    t0, total = jobs[0].arrival, 1.0
    for _ in range(4):   # the load clips work at the window's end, so a few rounds converge
        now = offered_load(jobs, n_gpus, window_of(jobs))
        f = now / load
        total *= f
        jobs = [dataclasses.replace(j, arrival=t0 + round((j.arrival - t0) * f)) for j in jobs]
    return jobs, total


OVERASK = {"hour": ("-overask", "over-asked (next hour), cancelled at the real end"),
           "2x": ("-overask2x", "over-asked (2x, next hour, at most 7 days), cancelled at the real end")}
NO_BOUND = PlannerSettings(wait_bound=None)


def trace_on_cluster(cfg: dict, a: argparse.Namespace) -> tuple[list, dict, int, float]:
    """The trace's jobs (a.trace, a.traces, a.days, a.overask), its tenants' shares, the hosts and
    how far the arrivals were squeezed: a fixed cluster (a.hosts, or the trace's `hosts:`) gets
    its arrivals brought closer together (or apart) to make a.load; otherwise the hosts that make it."""
    jobs, shares = load_jobs(cfg, a.trace, a.traces, a.days, a.overask)
    fixed = a.hosts or cfg["traces"][a.trace].get("hosts")
    squeeze = 1.0
    if fixed:
        jobs, squeeze = compress_to_load(jobs, a.load, fixed * cfg["host_gpus"])
    n_hosts = fixed or hosts_for_load(jobs, a.load, window_of(jobs), cfg["host_gpus"])
    return jobs, shares, n_hosts, squeeze


def bound_settings(spec: str) -> PlannerSettings:
    """Tuning: 'gpu-tenancy@<spec>', spec '+'-joined parts: '4' or '4h' a wait bound of 4 hours,
    '16gh' one of 16 GPU-hours, '1l' at most 1 lease past it at a time (wait_bound_leases),
    'keep' the first ETAs kept (keep_etas), 'fs' fair share alone (keep_etas off), '64as' the
    fair-share score halved per 64 GPU-hours waited (age_size_gpu_hours), '1qc' the GPU-hours a
    project's holds keep from now and its waiting leases ahead of a lease will use counted 1x in
    its score (queued_charge), '8sp' leases of 8 GPUs per VM or more not charged
    (queued_charge_spares_gpus), 'et' one VM's host chosen so that hosts empty together
    (empty_together). (make() reads '24hl', a fair-share half-life of 24 hours.)"""
    kw: dict = {}
    for part in spec.split("+"):
        if not part:
            continue
        if part in ("keep", "fs"):
            kw["keep_etas"] = part == "keep"
        elif part == "et":
            kw["empty_together"] = True
        elif part.endswith("qc"):
            kw["queued_charge"] = float(part[:-2])
        elif part.endswith("sp"):
            kw["queued_charge_spares_gpus"] = int(part[:-2])
        elif part.endswith("as"):
            kw["age_size_gpu_hours"] = float(part[:-2])
        elif part.endswith("gh"):
            kw["wait_bound_gpu_hours"] = float(part[:-2])
        elif part.endswith("l"):
            kw["wait_bound_leases"] = int(part[:-1])
        else:
            kw["wait_bound"] = round(float(part.rstrip("h")) * 3600)
    return PlannerSettings(**{"wait_bound": None, **kw})


def make(name: str, cfg: dict, shares, capacity: int):
    hl = cfg["fairshare_half_life_seconds"]
    if name == "gpu-tenancy":
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name)
    if name == "gpu-tenancy+quota":
        return GpuTenancy(quota_limits(shares, capacity, "quota"), hl, name)
    if name == "gpu-tenancy-nofs":   # diagnosis: the planner without fair share (age order)
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, fairshare=False)
    if name == "gpu-tenancy-nobound":   # fair share alone, whatever the default
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, settings=NO_BOUND)
    if name == "gpu-tenancy-bound":   # with the wait bound of replay.yaml
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name,
                          settings=PlannerSettings(wait_bound=cfg["wait_bound_seconds"]))
    if name.startswith("gpu-tenancy@"):   # '+noskip': keep_etas planning at every event (to measure the skip)
        parts = name.split("@", 1)[1].split("+")
        halves = [q for q in parts if q.endswith("hl")]   # '24hl': a fair-share half-life of 24 hours
        if halves and not float(halves[-1][:-2]) > 0:
            raise ValueError(f"{name}: a half-life must be more than 0 hours")
        return GpuTenancy(quota_limits(shares, capacity, "open"),
                          round(float(halves[-1][:-2]) * 3600) if halves else hl, name,
                          settings=bound_settings("+".join(q for q in parts if q != "noskip" and q not in halves)),
                          skip_settled="noskip" not in parts)
    if name == "gpu-tenancy-promise":   # prototype: promised leases first, later arrivals fit around them
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, promise="fairshare")
    if name == "gpu-tenancy-promise-eta":   # the same, the promised leases in the order of their ETAs
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, promise="eta")
    if name.startswith("gpu-tenancy-promise-near@"):   # only the ETAs due within <hours> are kept first
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, promise="near",
                          horizon=round(float(name.split("@", 1)[1].rstrip("h")) * 3600))
    if name == "gpu-tenancy-promise-shape":   # fair share; ETA order only among leases of one shape
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, promise="shape")
    if name.split("@")[0] == "gpu-tenancy-promise-breach":   # fair share, unless it would start a lease
        slack = name.split("@", 1)[1].rstrip("m") if "@" in name else "0"   # more than <minutes> after its ETA
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, promise="breach",
                          horizon=round(float(slack) * 60))
    if name == "gpu-tenancy-aging":   # earlier prototype: priority 1 once a lease waited aging_seconds
        return GpuTenancy(quota_limits(shares, capacity, "open"), hl, name, aging=cfg["aging_seconds"])
    if name == "EASY":
        return EASY()
    if name == "FIFO":
        return FIFO()
    if name == "refuse+retry":
        return RefuseRetry(cfg["retry_seconds"])
    raise ValueError(name)


def write_report(out_dir: str, tag: str, head: str, results: dict, with_plots: bool) -> str:
    """<tag>.md (the table) and <tag>.json in out_dir, and the PNG plots if asked."""
    md = table(results)
    os.makedirs(out_dir, exist_ok=True)
    try:
        made = plots(results, tag, os.path.join(out_dir, tag)) if with_plots else []
    except ImportError:   # matplotlib is an extra: the table is the result, the plots an aid
        made = []
    plan_line = "; ".join(f"{k}: {v['plans']} plans, {v['replans_per_s']:.0f} replans/s of wall time, "
                          f"{v['ms_per_plan']:.1f} ms per plan" for k, v in results.items() if "plans" in v)
    text = f"{head}\n\n{md}\n\n{plan_line}\n\nplots: {', '.join(os.path.basename(m) for m in made)}\n"
    with open(os.path.join(out_dir, tag + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, tag + ".json"), "w") as f:
        json.dump({k: {kk: vv for kk, vv in v.items() if kk not in ("hours", "use_series", "waits", "told")}
                   for k, v in results.items()}, f, indent=1)
    return text


def save_run(out_dir: str, tag: str, name: str, r: dict) -> None:
    """One scheduler's whole result, series included, so that runs made in
    separate processes (one per core) can be reported together (--merge)."""
    d = os.path.join(out_dir, tag + ".runs")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items()}, f)


def saved_runs(out_dir: str, tag: str, names: list[str]) -> dict:
    import numpy as np
    d = os.path.join(out_dir, tag + ".runs")
    have = sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json")) if os.path.isdir(d) else []
    out = {}
    for name in [n for n in names if n in have] + [n for n in have if n not in names]:
        r = json.load(open(os.path.join(d, name + ".json")))
        out[name] = {k: (np.array(v) if k in ("hours", "use_series", "waits") else v) for k, v in r.items()}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="philly-final")
    ap.add_argument("--load", type=float, default=0.8, help="offered load, e.g. 0.8")
    ap.add_argument("--traces", default=traces.default_trace_dir(),
                    help=f"directory of the trace CSVs (default ${traces.TRACES_ENV})")
    ap.add_argument("--config", default=os.path.join(HERE, "replay.yaml"))
    ap.add_argument("--hosts", type=int, help="this many hosts, the arrivals' spacing scaled to make --load")
    ap.add_argument("--days", type=float, help="only the first DAYS days of submissions")
    ap.add_argument("--overask", nargs="?", const="hour", choices=OVERASK,
                    help="leases ask for more than the run time and are cancelled at the real end: "
                         "'hour' (the flag alone) the run time rounded up to the hour, '2x' twice it rounded "
                         "up to the hour, at most 7 days")
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS))
    ap.add_argument("--no-etas", action="store_true",
                    help="faster: gpu-tenancy tells no ETA (ETA kept n/a), so it skips the plans it would run "
                         "on a full cluster only to tell arriving leases their ETA; the waits are the same")
    ap.add_argument("--progress", type=float, default=60, help="print progress every this many wall seconds")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--merge", action="store_true",
                    help="run nothing: report together every scheduler saved for this trace, load and days "
                         "(each run saves its schedulers in <out>/<tag>.runs/; --schedulers gives the order)")
    a = ap.parse_args(argv)
    if not a.traces:
        ap.error(f"give --traces or set {traces.TRACES_ENV} to the directory of the trace CSVs")
    cfg = yaml.safe_load(open(a.config))
    jobs, shares, n_hosts, squeeze = trace_on_cluster(cfg, a)
    fixed = a.hosts or cfg["traces"][a.trace].get("hosts")
    win = window_of(jobs)
    cap = n_hosts * cfg["host_gpus"]
    tag = f"{a.trace}-{int(round(a.load * 100))}" + (OVERASK[a.overask][0] if a.overask else "") + (f"-{a.days:g}d" if a.days else "")
    head = (f"trace {a.trace}: {len(jobs)} jobs, {len(shares)} tenants, {(win[1] - win[0]) / 86400:.1f} days; "
            f"cluster {n_hosts} hosts x {cfg['host_gpus']} = {cap} GPUs; offered load "
            f"{100 * offered_load(jobs, cap, win):.1f} %; durations "
            f"{OVERASK[a.overask][1] if a.overask else 'exact (oracle)'}"
            + (f"; arrival gaps x{squeeze:.3f} to make the load on a fixed cluster" if fixed else ""))
    print(head, flush=True)
    results = {}
    bound = {"bound_only": True, "mean": mean_wait_bound(jobs, cap)}
    if a.merge:
        results = saved_runs(a.out, tag, a.schedulers.split(","))
        print(write_report(a.out, tag, head, {**results, "lower bound (mean)": bound}, with_plots=True))
        return 0
    for name in a.schedulers.split(","):
        t, c = time.perf_counter(), time.process_time()
        sched = make(name, cfg, shares, cap)
        if a.no_etas and isinstance(sched, GpuTenancy) and not sched.settings.keep_etas:   # it needs them
            sched.first_eta = None   # no plans on a full cluster only for the ETAs; the same outcome
        out = simulate(jobs, n_hosts, sched, progress=a.progress)
        r = summarize(out, jobs, shares, cap)
        r["cpu_s"] = time.process_time() - c   # this process's CPU time for the run (goal: the whole set in 2 min)
        results[name] = r
        save_run(a.out, tag, name, r)
        extra = (f", {r['plans']} plans, {r['replans_per_s']:.0f} replans/s of wall time, "
                 f"{r['ms_per_plan']:.1f} ms/plan" if "plans" in r else "")
        eta = (f" ETA kept {100 * r['eta_kept']:.1f} % late P90 {hms(r['late_p90'])}"
               if r.get("eta_kept") is not None else "")
        if r.get("start_by_kept") is not None:
            eta += (f", start-by kept {100 * r['start_by_kept']:.1f} % (margin P50 "
                    f"{hms(r['start_by_margin_p50'])} P90 {hms(r['start_by_margin_p90'])})")
        print(f"  {name}: P50 {hms(r['p50'])} P90 {hms(r['p90'])} >=8 P90 {hms(r['big_p90'])} "
              f"(tenants within their share: {hms(r['big_p90_within'])}){eta} "
              f"({time.perf_counter() - t:.0f} s wall, {r['cpu_s']:.0f} s CPU{extra})", flush=True)
        tail = ", ".join(f"{t} {n}" + (f" ({big} big)" if big else "") for t, n, big in r["p90_tail"])
        print(f"    P90 tail (leases waiting at least the P90) by tenant: {tail}", flush=True)
        # the table so far, so that a long run that is stopped still leaves its finished rows
        text = write_report(a.out, tag, head, {**results, "lower bound (mean)": bound}, with_plots=False)
    text = write_report(a.out, tag, head, {**results, "lower bound (mean)": bound}, with_plots=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the idle GPUs go: GPU-time left free while a waiting lease could have started on it.

    python bench/held_back.py --trace philly-final --load 0.95 --hosts 36 --schedulers gpu-tenancy,EASY

A diagnosis for issue 18's big-lease goal, not a goal's figure. At 95 % load the default planner
uses 93.5 % of the GPUs where EASY uses 95.0 % (docs/performance.md): the queue it leaves behind
is what the last tenants in fair share wait for. GPUs can stay free while leases wait for two
reasons: no waiting lease fits on them (fragmentation: the replay's `frag` counts those the
oldest waiting lease cannot use), or one fits but starting it now would delay a reservation
(conservative backfill protects every waiting lease's; EASY only the head's). This replays the
schedulers as bench/replay.py does and integrates, after each decision, the free GPUs while at
least one waiting lease fits on them now ("held back"), and the GPUs of the largest such lease
("could start": a lower bound of what an extra start would have used). Physical fit only: the
replay's gpu-tenancy runs with open quotas, so nothing else keeps a fitting lease out.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))

import yaml  # noqa: E402

import traces  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from metrics import summarize  # noqa: E402
from replay import OVERASK, make, trace_on_cluster  # noqa: E402


class HeldBack:
    """Wraps a scheduler's schedule() to integrate, between its decisions, the free GPUs on
    which some waiting lease fits (after the decision's starts)."""

    def __init__(self, sched, waiting_of):
        self.sched, self.waiting_of = sched, waiting_of
        self.held_gpu_s = self.could_gpu_s = self.held_s = 0.0
        self.t_prev, self.held_now, self.could_now = None, 0, 0
        inner = sched.schedule

        def schedule(now, cluster, running):
            if self.t_prev is not None and now > self.t_prev:
                dt = now - self.t_prev
                self.held_gpu_s += self.held_now * dt
                self.could_gpu_s += self.could_now * dt
                self.held_s += dt if self.held_now else 0
            starts, wake = inner(now, cluster, running)
            self.measure(cluster, starts)
            self.t_prev = now
            return starts, wake
        sched.schedule = schedule

    def measure(self, cluster, starts) -> None:
        free = list(cluster.free)
        started = set()
        for job, hosts in starts:
            started.add(job.jid)
            for h in hosts:
                free[h] -= job.gpus_per_vm
        shapes = {(j.gpus_per_vm, j.vms) for j in self.waiting_of(self.sched) if j.jid not in started}
        fitting = [g * n for g, n in shapes if sum(f // g for f in free) >= n]
        self.held_now = sum(free) if fitting else 0
        self.could_now = min(max(fitting), sum(free)) if fitting else 0


def waiting_jobs(sched):
    """The scheduler's waiting jobs: the planner's `waiting`, the baselines' `queue`."""
    for name in ("waiting", "queue"):
        if hasattr(sched, name):
            return getattr(sched, name).values()
    raise TypeError(f"{sched.name}: no waiting jobs to read")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="philly-final")
    ap.add_argument("--traces", default=os.environ.get(traces.TRACES_ENV))
    ap.add_argument("--load", type=float, default=0.95)
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--days", type=float)
    ap.add_argument("--overask", nargs="?", const="hour", choices=OVERASK)
    ap.add_argument("--schedulers", default="gpu-tenancy,EASY")
    ap.add_argument("--config", default=os.path.join(HERE, "replay.yaml"))
    a = ap.parse_args(argv)
    if not a.traces:
        ap.error(f"give --traces or set {traces.TRACES_ENV} to the directory of the trace CSVs")
    cfg = yaml.safe_load(open(a.config))
    jobs, shares, n_hosts, _ = trace_on_cluster(cfg, a)
    cap = n_hosts * cfg["host_gpus"]
    print(f"trace {a.trace}, {len(jobs)} jobs, {n_hosts} hosts ({cap} GPUs), load {a.load}", flush=True)
    for name in a.schedulers.split(","):
        sched = make(name, cfg, shares, cap)
        if hasattr(sched, "settings") and not sched.settings.keep_etas:
            sched.first_eta = None   # the waits do not depend on the ETAs told (replay.py --no-etas)
        probe = HeldBack(sched, waiting_jobs)
        out = simulate(jobs, n_hosts, sched, progress=120)
        r = summarize(out, jobs, shares, cap)
        span = cap * max(1, out.span[1] - out.span[0])
        print(f"  {name}: GPU use {100 * r['use']:.1f} %, idle unusable by the oldest {100 * r['frag']:.1f} %, "
              f"held back {100 * probe.held_gpu_s / span:.1f} % of GPU-time "
              f"({100 * probe.held_s / max(1, out.span[1] - out.span[0]):.1f} % of the time), "
              f"could start {100 * probe.could_gpu_s / span:.1f} %; P50 {r['p50'] / 3600:.2f} h, "
              f"P90 {r['p90'] / 3600:.1f} h, >=8 P90 {r['big_p90'] / 3600:.1f} h", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

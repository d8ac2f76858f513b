"""Figures from one replay outcome: waits, GPU use over time, idle
fragmentation, fairness across tenants."""
from __future__ import annotations

import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service"))
from gpu_tenancy.domain.eta_honesty import ETA_SLACK, eta_honesty  # noqa: E402
from gpu_tenancy.domain.start_by import LoadTimeline, StartBy, told_start_bys  # noqa: E402
from gpu_tenancy.whatif.planner_sched import MODEL  # noqa: E402

HOUR = 3600
TAU = 600   # bounded slowdown: run times under 10 minutes count as 10 minutes
BIG_GPUS = 8   # a "big" lease, as goal 4 counts them: 8 GPUs or more (one whole host here)


def jain(xs) -> float:
    xs = [x for x in xs]
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def _integral_at(times: np.ndarray, deltas: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Integral from -inf to each grid point of the step function built by `deltas` at `times`."""
    if len(times) == 0:
        return np.zeros(len(grid))
    o = np.argsort(times, kind="stable")
    t, d = times[o].astype(float), deltas[o].astype(float)
    level = np.cumsum(d)                               # value after t[i]
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])   # integral up to t[i]
    k = np.searchsorted(t, grid, side="right") - 1
    out = np.zeros(len(grid))
    ok = k >= 0
    out[ok] = area[k[ok]] + level[k[ok]] * (grid[ok] - t[k[ok]])
    return out


def hourly(jobs_intervals, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean level per hour of a sum of (start, end, amount) boxes over [lo, hi)."""
    grid = np.arange(lo, hi + HOUR, HOUR, dtype=float)
    if not jobs_intervals:
        return grid[:-1], np.zeros(len(grid) - 1)
    a = np.array(jobs_intervals, dtype=float)
    times = np.concatenate([a[:, 0], a[:, 1]])
    deltas = np.concatenate([a[:, 2], -a[:, 2]])
    return grid[:-1], np.diff(_integral_at(times, deltas, grid)) / HOUR


def summarize(out, jobs, shares: dict[str, float], capacity: int) -> dict:
    waits = np.array([out.start[j.jid] - j.arrival for j in jobs], dtype=float)
    big = np.array([out.start[j.jid] - j.arrival for j in jobs if j.gpus >= BIG_GPUS], dtype=float)
    lo, hi = jobs[0].arrival, jobs[-1].arrival + 1          # the submission window
    end_all = max(out.end(j) for j in jobs)
    # GPU use over time (hourly), and its mean over the submission window
    busy = [(out.start[j.jid], out.end(j), j.gpus) for j in jobs]
    hours, use = hourly(busy, lo, end_all)
    in_win = hours < hi
    r = {
        "n": len(jobs), "n_big": len(big),
        "p50": float(np.percentile(waits, 50)), "p90": float(np.percentile(waits, 90)),
        "p99": float(np.percentile(waits, 99)), "mean": float(waits.mean()),
        "big_p50": float(np.percentile(big, 50)) if len(big) else 0.0,
        "big_p90": float(np.percentile(big, 90)) if len(big) else 0.0,
        "use": float(use[in_win].mean() / capacity) if in_win.any() else 0.0,
        "frag": out.frag_gpu_seconds / (capacity * max(1, out.span[1] - out.span[0])),
        "makespan_h": (end_all - lo) / HOUR,
        "wall_s": out.wall_seconds,
        "hours": hours, "use_series": use / capacity, "waits": waits,
    }
    # fairness 1: Jain's index over tenants of their mean bounded slowdown
    sd = defaultdict(list)
    for j, w in zip(jobs, waits):
        sd[j.tenant].append(max(1.0, (w + j.runtime) / max(j.runtime, TAU)))
    r["jain_slowdown"] = jain([np.mean(v) for v in sd.values()])
    # fairness 2: per hour, among tenants that wanted GPUs, the share of their
    # entitlement min(quota share x C, GPUs asked for) they got (capped at 1);
    # Jain's index of that, averaged over hours with >= 2 such tenants
    per_t_use, per_t_want = defaultdict(list), defaultdict(list)
    for j in jobs:
        s = out.start[j.jid]
        per_t_use[j.tenant].append((s, out.end(j), j.gpus))
        per_t_want[j.tenant].append((j.arrival, out.end(j), j.gpus))
    sat = []
    for t in per_t_use:
        _, u = hourly(per_t_use[t], lo, hi)
        _, w = hourly(per_t_want[t], lo, hi)
        ent = np.minimum(shares.get(t, 0.0) * capacity, w)
        x = np.where(ent > 1e-9, np.minimum(1.0, u / np.maximum(ent, 1e-9)), np.nan)
        sat.append(x)
    S = np.array(sat)
    vals = []
    for col in S.T:
        c = col[~np.isnan(col)]
        if len(c) >= 2:
            vals.append(jain(c))
    r["jain_quota"] = float(np.mean(vals)) if vals else 1.0
    r.update(big_within_share(out, jobs, shares))
    r["p90_tail"] = p90_tail(jobs, waits)
    r.update(eta_figures(out, jobs))
    r.update(start_by_figures(out, jobs, shares=shares, capacity=capacity))
    # each job's first ETA (None: not told), beside its wait: with them a saved run can be
    # scored again under another start-by rule without replaying it
    r["told"] = None if out.first_eta is None else [out.first_eta.get(j.jid) for j in jobs]
    plans = out.extra.get("plans")
    if plans:
        r["plans"] = plans
        r["replans_per_s"] = plans / out.wall_seconds
        r["ms_per_plan"] = 1000 * out.extra["plan_seconds"] / plans
        r["eta_only_plans"] = out.extra.get("eta_only_plans", 0)
        r["promise_replans"] = out.extra.get("promise_replans", 0)   # plans made again to keep an ETA
    return r


def big_within_share(out, jobs, shares: dict[str, float]) -> dict:
    """The big leases' (>= 8 GPUs) P90 wait over the tenants that asked no more than their quota
    share of all the GPU-hours run. Fair share keeps a tenant over its share behind the others
    by design, and on the Philly final set two tenants that asked 2.0x and 2.4x their share
    submitted 43 % of the big leases: the P90 over all big leases is largely theirs."""
    used: dict[str, float] = defaultdict(float)
    for j in jobs:
        used[j.tenant] += j.gpus * j.runtime
    total = sum(used.values())
    within = {t for t, u in used.items() if u <= shares.get(t, 0.0) * total}
    big = np.array([out.start[j.jid] - j.arrival for j in jobs if j.gpus >= BIG_GPUS and j.tenant in within], dtype=float)
    return {"n_big_within": len(big), "big_p90_within": float(np.percentile(big, 90)) if len(big) else 0.0,
            "over_share": sorted(set(used) - within)}


def p90_tail(jobs, waits, top: int = 4) -> list[tuple[str, int, int]]:
    """Whose leases make the P90: the tenants with the most leases among those that waited at
    least the P90, as (tenant, leases there, of which >= 8 GPUs), most first (then by name).
    A setting that brings the big leases' P90 down can raise the P90 by putting another
    tenant's small leases there (docs/performance.md, "A stronger setting for 95 %")."""
    waits = np.asarray(waits, dtype=float)
    if not len(waits):
        return []
    p90 = np.percentile(waits, 90)
    count: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for j, w in zip(jobs, waits):
        if w >= p90:
            c = count[j.tenant]
            c[0] += 1
            c[1] += j.gpus >= BIG_GPUS
    ranked = sorted(count.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return [(t, n, big) for t, (n, big) in ranked[:top]]


def eta_figures(out, jobs) -> dict:
    """ETA honesty (domain/eta_honesty.py) over the jobs that waited: the share that
    started by their first ETA + 10 min, P50/P90 lateness, and how many of them were
    given an ETA at all (EASY tells only the head). None where the scheduler gives no ETA."""
    waited = [j for j in jobs if out.start[j.jid] > j.arrival]
    if out.first_eta is None:
        return {"n_waited": len(waited), "n_eta": None, "eta_kept": None, "late_p50": None, "late_p90": None}
    h = eta_honesty((out.first_eta[j.jid], out.start[j.jid]) for j in waited if j.jid in out.first_eta)
    return {"n_waited": len(waited), "n_eta": h.leases, "eta_kept": h.kept_ratio,
            "late_p50": h.lateness_percentile(50), "late_p90": h.lateness_percentile(90)}


def load_classes_at(out, jobs, shares: dict, capacity: int):
    """load_at(project, t): the project's load class at t (domain/start_by.py: LoadTimeline), from
    what its started jobs held just before t against its share of the cluster's GPUs."""
    return LoadTimeline(((j.tenant, MODEL, j.gpus, out.start[j.jid], out.end(j)) for j in jobs if j.jid in out.start),
                        {(t, MODEL): s for t, s in shares.items()}, {MODEL: capacity}).at


def start_by_figures(out, jobs, model: StartBy | None = None, shares: dict | None = None,
                     capacity: int | None = None) -> dict:
    """The start-by (domain/start_by.py) each lease told an ETA would have been told with it, from
    what had happened by then (told_start_bys). Over the leases that waited: the share that started
    by their start-by + 10 min, and the P50/P90 of its margin over the ETA and of how long before
    it they started. None where the scheduler gives no ETA."""
    told = out.first_eta
    none = dict.fromkeys(("start_by_kept", "start_by_margin_p50", "start_by_margin_p90", "start_by_early_p50"))
    if not told:
        return none
    # (one that starts as told waits for nothing); with the tenants' shares, each told and
    # sampled in its load class as the service does
    load_at = load_classes_at(out, jobs, shares, capacity) if shares and capacity else None
    by = told_start_bys(((j.tenant, j.jid, j.arrival, told[j.jid], out.start[j.jid]) for j in jobs
                         if j.jid in told and out.start[j.jid] > j.arrival), model, load_at)
    if not by:
        return none
    margins = np.array([by[jid] - told[jid] for jid in by], dtype=float)
    early = np.array([max(0, by[jid] - out.start[jid]) for jid in by], dtype=float)
    return {"start_by_kept": sum(out.start[jid] <= b + ETA_SLACK for jid, b in by.items()) / len(by),
            "start_by_margin_p50": float(np.percentile(margins, 50)),
            "start_by_margin_p90": float(np.percentile(margins, 90)),
            "start_by_early_p50": float(np.percentile(early, 50))}

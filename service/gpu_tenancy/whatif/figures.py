"""What a replay gives, in the figures an operator compares: waits (P50, P90) overall,
per project and GPU model and for leases of 8 GPUs or more, ETA and start-by kept, GPU use, Jain's
fairness over projects, the wait CDF; and, between two replays, who gains and who loses.

A lease's wait is from the start it asked for (its creation, or a later asked start) to
its start. Percentiles are the service's (nearest rank: domain/figures.py)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from gpu_tenancy.domain.eta_honesty import eta_honesty
from gpu_tenancy.domain.figures import percentile
from gpu_tenancy.domain.start_by import LoadTimeline, model_gpus, told_start_bys
from gpu_tenancy.whatif.event_loop import Outcome
from gpu_tenancy.whatif.history import History

BIG = 8            # a "big" lease: this many GPUs or more
TAU = 600          # bounded slowdown: run times under 10 minutes count as 10 minutes
CDF_POINTS = 50    # the wait CDF, as this many quantiles
SAME = 60          # a project's P90 moving less than this many seconds neither gains nor loses


def jain(xs: Sequence[float]) -> float:
    """Jain's index: 1 when all are equal, 1/n when one has everything."""
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def waits(history: History, out: Outcome) -> dict[str, int]:
    """jid: seconds from its asked start to its start (leases that started)."""
    return {x.jid: out.start[x.jid] - x.start_asked for x in history.leases if x.jid in out.start}


def cdf(values: Sequence[int], points: int = CDF_POINTS) -> list[list[float]]:
    """[wait seconds, share of leases waiting at most that], at evenly spaced shares."""
    if not values:
        return []
    ordered = sorted(values)
    out = [[float(ordered[0]), 0.0]]
    for i in range(1, points + 1):
        q = 100 * i / points
        out.append([float(percentile(ordered, q) or 0), round(q / 100, 4)])
    return out


def start_bys(history: History, out: Outcome) -> dict[str, int]:
    """jid: the start-by each lease told an ETA that waited was told with it (domain/start_by.py),
    its wait counted from its asked start, as the service counts it (engine/start_by_margins.py)."""
    told = out.first_eta or {}
    # waited: started after its asked start, or not started at all (it waits still)
    waited = (x for x in history.leases
              if x.jid in told and (x.jid not in out.start or out.start[x.jid] > x.start_asked))
    # each told and sampled in its project's load class then, as the service does
    loads = LoadTimeline(((x.tenant, x.gpu_model, x.gpus, out.start[x.jid], out.end(x))
                          for x in history.leases if x.jid in out.start),
                         {key: q.weight for key, q in history.quotas.items()}, model_gpus(history.hosts))
    return told_start_bys(((x.tenant, x.jid, x.start_asked, told[x.jid], out.start.get(x.jid)) for x in waited),
                          None, loads.at)


def summary(history: History, out: Outcome) -> dict[str, Any]:
    w = waits(history, out)
    leases = [x for x in history.leases if x.jid in w]
    all_w = [w[x.jid] for x in leases]
    big = [w[x.jid] for x in leases if x.gpus >= BIG]
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    per_project: dict[str, list[int]] = defaultdict(list)
    slowdown: dict[str, list[float]] = defaultdict(list)
    for x in leases:
        groups[(x.tenant, x.gpu_model)].append(w[x.jid])
        per_project[x.tenant].append(w[x.jid])
        slowdown[x.tenant].append(max(1.0, (w[x.jid] + x.runtime) / max(x.runtime, TAU)))
    waited = [x for x in leases if w[x.jid] > 0]
    told = out.first_eta or {}
    honesty = eta_honesty((told[x.jid], out.start[x.jid]) for x in waited if x.jid in told)
    start_by = start_bys(history, out)
    kept_start_by = eta_honesty((start_by[x.jid], out.start[x.jid]) for x in waited if x.jid in start_by)
    span = max(1, history.end - history.start)
    used = sum(x.gpus * max(0, min(history.end, out.end(x)) - max(history.start, out.start[x.jid]))
               for x in leases)
    capacity = sum(h.gpus for h in history.hosts if h.enabled)
    return {
        "leases": len(leases),
        "never_started": len(history.leases) - len(leases),
        "p50": percentile(all_w, 50), "p90": percentile(all_w, 90),
        "big_leases": len(big), "big_p90": percentile(big, 90),
        "eta_kept": None if honesty.kept_ratio is None else round(honesty.kept_ratio, 4),
        "start_by_kept": None if kept_start_by.kept_ratio is None else round(kept_start_by.kept_ratio, 4),
        "gpu_use": round(used / (capacity * span), 4) if capacity else None,
        "jain": round(jain([sum(v) / len(v) for _, v in sorted(slowdown.items())]), 4),
        "groups": [{"project_id": p, "gpu_model": m, "leases": len(v), "p50": percentile(v, 50),
                    "p90": percentile(v, 90)} for (p, m), v in sorted(groups.items())],
        "projects": [{"project_id": p, "leases": len(v), "p50": percentile(v, 50), "p90": percentile(v, 90)}
                     for p, v in sorted(per_project.items())],
        "cdf": cdf(all_w),
    }


def projects(current: dict[str, Any], proposed: dict[str, Any]) -> list[dict[str, Any]]:
    """Per project (its leases of every model): P90 now and as proposed, and whether it gains
    (waits less), loses or stays the same."""
    a = {r["project_id"]: r["p90"] for r in current["projects"]}
    b = {r["project_id"]: r["p90"] for r in proposed["projects"]}
    rows = []
    for p in sorted(set(a) | set(b)):
        before, after = a.get(p), b.get(p)
        if before is None or after is None:
            verdict = "same" if before == after else ("gains" if after is not None else "loses")
        else:
            verdict = "gains" if after < before - SAME else "loses" if after > before + SAME else "same"
        rows.append({"project_id": p, "p90_current": before, "p90_proposed": after, "verdict": verdict})
    return rows

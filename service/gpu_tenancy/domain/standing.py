"""Fair-share standing (Slurm's sshare): per project and GPU model, its quota, the
GPUs it holds now and how many of them it borrows, its decayed use, its weight, and
where that puts it in the planner's fair-share order.

The score and the weight are the planner's own (fairshare.share_score, a project
without a quota weighing 1), from the same decayed usage, so the rank shown is the
order the planner takes equal-priority leases in (before the wait bound, which
comes first, and the lease's age, which breaks ties).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .fairshare import share_score
from .model import Hold, LeaseRequest, QuotaLimit

NO_QUOTA_WEIGHT = 1.0   # as the planner weighs a project without a quota for the model


@dataclass(frozen=True)
class Standing:
    project_id: str
    gpu_model: str
    nominal: int               # quota: GPUs it may hold at any instant
    borrow_limit: int          # more it may hold on idle capacity
    in_use: int                # GPUs it holds now (preemptible leases included)
    borrowed: int              # of those, beyond its nominal quota
    decayed_gpu_hours: float   # recent use, decayed with the planner's half-life
    weight: float
    score: float               # decayed_gpu_hours / weight: lower goes first
    rank: int                  # 1 goes first; equal scores share a rank
    waiting: int               # its leases waiting for this model


def standing(now: int, quotas: Mapping[tuple[str, str], QuotaLimit], holds: Iterable[Hold],
             usage: Mapping[tuple[str, str], float], waiting: Sequence[LeaseRequest]) -> list[Standing]:
    """Every (project, GPU model) with a quota, use, holds or waiting leases, ranked per
    model by the planner's fair-share score; sorted by model, rank, project."""
    held: dict[tuple[str, str], int] = defaultdict(int)
    within: dict[tuple[str, str], int] = defaultdict(int)   # held inside quota (preemptible leases use none)
    for h in holds:
        if h.start <= now < h.end:
            held[(h.project_id, h.gpu_model)] += h.gpus
            if not h.preemptible:
                within[(h.project_id, h.gpu_model)] += h.gpus
    queued: dict[tuple[str, str], int] = defaultdict(int)
    for lr in waiting:
        queued[(lr.project_id, lr.gpu_model)] += 1
    keys = set(quotas) | set(usage) | set(held) | set(queued)
    scored = []
    for p, m in keys:
        q = quotas.get((p, m))
        weight = q.weight if q is not None else NO_QUOTA_WEIGHT
        scored.append((m, share_score(usage, p, m, weight), p, q, weight))
    scored.sort(key=lambda row: (row[0], row[1], row[2]))
    out: list[Standing] = []
    rank, last = 0, None
    for m, score, p, q, weight in scored:
        if last is None or last[0] != m:
            rank, last = 1, (m, score)
        elif last[1] != score:
            rank, last = rank + 1, (m, score)
        nominal = q.gpus if q is not None else 0
        out.append(Standing(p, m, nominal, q.borrow_gpus if q is not None else 0, held[(p, m)],
                            max(0, within[(p, m)] - nominal), usage.get((p, m), 0.0), weight, score, rank,
                            queued[(p, m)]))
    return out

"""Fair-share standing (Slurm's sshare): per project and GPU model, its quota, the
GPUs it holds now and how many of them it borrows, its decayed use, its weight, and
where that puts it in the planner's fair-share order.

The score and the weight are the planner's own (fairshare.share_score, a project
without a quota weighing 1), from the same decayed usage, so the rank shown is the
order the planner takes equal-priority leases in (before the wait bound, which
comes first, and the lease's age, which breaks ties).

With the queued charge on (PlannerSettings.queued_charge), the planner orders a lease by
its project's score plus its charge, which grows with what the project holds from now on
and has waiting ahead of the lease; the rank is then that of the project's next lease: one
asked now, of priority 0, not spared (fewer GPUs per VM than queued_charge_spares_gpus), whose
charge (`charge`, queued_charge.NewLeaseCharge) counts its holds and waiting leases of
priority 0 or more. Age x size leaves a new lease's score as it is (it has not waited yet).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .fairshare import share_score
from .model import Hold, LeaseRequest, QuotaLimit
from .queued_charge import NewLeaseCharge

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
    rank: int                  # 1 goes first, by score + charge; equal ones share a rank
    waiting: int               # its leases waiting for this model
    charge: float = 0.0        # the queued charge its next lease would take (0: the rule off)


def _next_lease(p: str, m: str, now: int) -> LeaseRequest:
    """A project's next lease as the rank reads it: asked now, after all of its own, 1 GPU."""
    return LeaseRequest("", p, m, 1, 1, 1, now, None, now, arrival=2 ** 62)


def standing(now: int, quotas: Mapping[tuple[str, str], QuotaLimit], holds: Sequence[Hold],
             usage: Mapping[tuple[str, str], float], waiting: Sequence[LeaseRequest],
             queued_charge: float | None = None, spared_gpus: int | None = None) -> list[Standing]:
    """Every (project, GPU model) with a quota, use, holds or waiting leases, ranked per
    model by the planner's fair-share score (with `queued_charge`, the planner's settings',
    that of its next lease: plus its charge); sorted by model, rank, project."""
    charge_of = NewLeaseCharge(waiting, holds, now, quotas, queued_charge, spared_gpus)
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
        score, charge = share_score(usage, p, m, weight), charge_of(_next_lease(p, m, now))
        scored.append((m, score + charge, p, q, weight, score, charge))   # the planner's sum, as it adds them
    scored.sort(key=lambda row: (row[0], row[1], row[2]))
    out: list[Standing] = []
    rank, last = 0, None
    for m, ranked, p, q, weight, score, charge in scored:
        if last is None or last[0] != m:
            rank, last = 1, (m, ranked)
        elif last[1] != ranked:
            rank, last = rank + 1, (m, ranked)
        nominal = q.gpus if q is not None else 0
        out.append(Standing(p, m, nominal, q.borrow_gpus if q is not None else 0, held[(p, m)],
                            max(0, within[(p, m)] - nominal), usage.get((p, m), 0.0), weight, score, rank,
                            queued[(p, m)], charge))
    return out

"""The planner's order: which waiting lease goes first, and how many go ahead of each.

Priority desc; then, with keep_etas, the guarded leases by the ETA they were told; then, with
a wait bound, the leases past it in the order they reached it (bound_protected: at most
wait_bound_leases per GPU model at a time); then fair share asc (share_score, aged with age x
size: domain/age_size.py); then created_at, arrival, lease_id (order_key). FairShareScores
keeps each project's fair-share score once per plan; AheadCounter counts, as a plan goes, the
leases ahead of each lease (LeasesAhead) by the part of the order that puts them there (what
its reasons say): a project's own leases ahead with a lower score (age x size, the queued charge)
apart from other projects' (with fair share alone its leases share one score). Pure.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from typing import NamedTuple

from .age_size import aged_score
from .fairshare import share_score
from .model import LeaseRequest, QuotaLimit
from .plan_settings import PlannerSettings

__all__ = ["OrderKey", "GUARDED", "BOUND", "FAIR", "waiting_since", "bound_reached_at", "past_wait_bound",
           "bound_protected", "guardable", "order_key", "FairShareScores", "LeasesAhead", "AheadCounter"]


def _weight(quotas: Mapping[tuple[str, str], QuotaLimit], p: str, m: str) -> float:
    q = quotas.get((p, m))
    return q.weight if q is not None else 1.0


OrderKey = tuple[int, int, float, int, int, str]

# the tiers of the order within one priority: guarded (keep_etas), past the wait bound, fair share
GUARDED, BOUND, FAIR = -1, 0, 1


def waiting_since(lr: LeaseRequest) -> int:
    """When the lease began to wait: asked for, or its earliest start if later."""
    return max(lr.created_at, lr.earliest_start)


def bound_reached_at(lr: LeaseRequest, settings: PlannerSettings) -> int | None:
    """When the lease reaches the wait bound (the first of its two forms); None: never."""
    since, at = waiting_since(lr), None
    if settings.wait_bound is not None:
        at = since + settings.wait_bound
    if settings.wait_bound_gpu_hours is not None:
        need = max(1, lr.gpus_per_vm * lr.instances)
        t = since + -(-round(settings.wait_bound_gpu_hours * 3600) // need)
        at = t if at is None else min(at, t)
    return at


def past_wait_bound(lr: LeaseRequest, now: int, settings: PlannerSettings) -> bool:
    at = bound_reached_at(lr, settings)
    return at is not None and now >= at


def bound_protected(waiting: Sequence[LeaseRequest], now: int, settings: PlannerSettings) -> set[str]:
    """The leases that go before fair share: past the wait bound, and, when
    wait_bound_leases is set, among the first that many of their GPU model to reach it."""
    if not settings.bounded:
        return set()
    past = [(lr.gpu_model, -lr.priority, at, lr.created_at, lr.arrival, lr.lease_id)
            for lr in waiting if (at := bound_reached_at(lr, settings)) is not None and now >= at]
    if settings.wait_bound_leases is None:
        return {k[-1] for k in past}
    taken: dict[str, int] = defaultdict(int)
    out = set()
    for k in sorted(past):
        if taken[k[0]] < settings.wait_bound_leases:
            taken[k[0]] += 1
            out.add(k[-1])
    return out


def guardable(lr: LeaseRequest) -> bool:
    """A lease whose ETA can be kept: told one, and not preemptible (those are ended anyway)."""
    return lr.first_eta is not None and not lr.preemptible


def order_key(lr: LeaseRequest, quotas: Mapping[tuple[str, str], QuotaLimit],
              usage: Mapping[tuple[str, str], float] | None, now: int = 0,
              settings: PlannerSettings = PlannerSettings(),
              protected: set[str] | None = None,
              guarded: AbstractSet[str] | None = None,
              charged: Mapping[str, float] | None = None) -> tuple[int, int, float, int, int, str]:
    """Planner order: priority desc; then, with keep_etas, the guarded leases (those of
    `guarded`, by default those marked so) by the ETA they were told; then leases past the
    wait bound (those of `protected`, by default every one), by when they reached it; then
    the rest by fair share asc, created_at asc; then the order they were asked in (arrival:
    leases asked in the same second), lease_id. `charged`: the queued charge of the leases
    (domain/queued_charge.py, made among the waiting leases), none if not given."""
    if settings.keep_etas and guardable(lr) and (lr.guarded if guarded is None else lr.lease_id in guarded):
        return (-lr.priority, GUARDED, lr.first_eta or 0, lr.created_at, lr.arrival, lr.lease_id)
    at = bound_reached_at(lr, settings)
    if at is not None and now >= at and (protected is None or lr.lease_id in protected):
        return (-lr.priority, BOUND, at, lr.created_at, lr.arrival, lr.lease_id)
    score = aged_score(share_score(usage, lr.project_id, lr.gpu_model, _weight(quotas, lr.project_id, lr.gpu_model))
                       + (charged.get(lr.lease_id, 0.0) if charged else 0.0), lr, now, settings.age_size_gpu_hours)
    return (-lr.priority, FAIR, score, lr.created_at, lr.arrival, lr.lease_id)


class FairShareScores:
    """Fair-share scores (share_score) per (project, GPU model), each computed once per plan."""

    def __init__(self, quotas: Mapping[tuple[str, str], QuotaLimit], usage: Mapping[tuple[str, str], float] | None):
        self.quotas, self.usage = quotas, usage
        self.known: dict[tuple[str, str], float] = {}

    def of(self, p: str, m: str) -> float:
        s = self.known.get((p, m))
        if s is None:
            s = self.known[(p, m)] = share_score(self.usage, p, m, _weight(self.quotas, p, m))
        return s


@dataclass
class _Block:
    """For one GPU model: the positions where the current runs of the order began,
    of one priority, then of one tier (guarded, past the wait bound, fair share), then
    of one fair-share score, and how many leases of each tier the priority's run has
    had; per project, its leases in the fair-share run, the last one's score and how many
    had that score. The leases of each part ahead of a lease are what its reasons count."""
    priority: int
    priority_from: int
    tier: int
    tier_from: int
    score: float | None
    score_from: int
    tiers: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    own: dict[str, tuple[int, float | None, int]] = field(default_factory=dict)


class LeasesAhead(NamedTuple):
    """How many leases of its GPU model are ahead of a lease, by which part of the order
    (a tuple: one is made per lease per plan)."""
    position: int      # 1-based
    priority: int      # of higher priority
    bound: int         # past the wait bound while it is not
    fairshare: int     # of other projects with a lower fair-share score
    order: int         # of its own tier and score, asked earlier (guarded: told an earlier ETA)
    guarded: int = 0   # keeping the ETA they were told while it is not
    own: int = 0       # of its own project with a lower score: only with age x size or the queued charge
                       # (fair share alone gives a project's leases one score: those are in `order`)

    @property
    def total(self) -> int:
        return self.position - 1


class AheadCounter:
    """The planner order seen per GPU model, as it goes: each lease's LeasesAhead. `aged`: age x
    size or the queued charge is on (PlannerSettings.aged); off, a project's leases share one
    score, so none of its own is of a lower score and they are not looked for."""

    def __init__(self, aged: bool = True) -> None:
        self.count: dict[str, int] = defaultdict(int)
        self.blocks: dict[str, _Block] = {}
        self.aged = aged

    def next(self, lr: LeaseRequest, tier: int, score: float | None) -> LeasesAhead:
        m = lr.gpu_model
        i = self.count[m]
        self.count[m] = i + 1
        b = self.blocks.get(m)
        if b is None or b.priority != lr.priority:
            b = self.blocks[m] = _Block(lr.priority, i, tier, i, score, i)
        elif b.tier != tier:
            b.tier, b.tier_from, b.score, b.score_from = tier, i, score, i
        elif b.score != score:
            b.score, b.score_from = score, i
        own = 0
        if tier == FAIR and self.aged:
            # scores ascend: the project's leases of a lower score are all it had before its run of this one
            had, last, same = b.own.get(lr.project_id, (0, None, 0))
            same = same if last == score else 0
            own = had - same
            b.own[lr.project_id] = (had + 1, score, same + 1)
        ahead = LeasesAhead(i + 1, b.priority_from, b.tiers[BOUND] if tier == FAIR else 0,
                            b.score_from - b.tier_from - own, i - b.score_from,
                            b.tiers[GUARDED] if tier != GUARDED else 0, own)
        b.tiers[tier] += 1
        return ahead

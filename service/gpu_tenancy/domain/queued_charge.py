"""The queued charge in the planner's fair-share order (PlannerSettings.queued_charge).

Issue 18's "count a reservation's cost in fair share", in the reading that charges the leases
that go in front: fair share alone orders a waiting lease by its project's recent use only, so
a light tenant's flood of small leases all goes before a heavy tenant's big lease, each taking
GPUs that the big lease's reservation was draining, and the big lease waits for days. With this
rule on, what a project has committed ahead of a lease counts in the lease's score as if already
used: its score is its project's plus `charge` x those GPU-hours over the project's weight: what
the project's holds of that GPU model still keep from now to their end (recent use counts only up
to now: without them, a lease that starts would lower its project's score), and the asked
GPU-hours (GPUs x asked hours) of its waiting leases of that model ahead of it in the project's
own order. A flood then goes before the big lease only until its projected use passes the big
lease's project's, and interleaves with it from there. The order of one project's leases never changes (the charge only
grows along it), except with `spared_gpus` (PlannerSettings.queued_charge_spares_gpus): leases of
that many GPUs per VM or more (VMs that need that much of one host drained; not GPUs in all, else a
tenant escapes the charge by bundling 1-GPU jobs into gangs) are not charged, only counted for the
leases after them, so a big lease
keeps its project's plain score against every charged small lease: the small leases that would
take the GPUs its reservation drains pay for what they and theirs hold first.

The charge depends on the other waiting leases, not on the lease alone; a new lease, asked after
its project's waiting leases, changes no other lease's charge, so the create's fit into the plan
(domain/plan_insert.py) works with the rule on: NewLeaseCharge is a new lease's charge and
keeps the running sums as leases are added. Pure and deterministic.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping

from .model import Hold, LeaseRequest, QuotaLimit

__all__ = ["queued_charges", "asked_gpu_hours", "held_gpu_hours", "NewLeaseCharge"]


def asked_gpu_hours(lr: LeaseRequest) -> float:
    """What the lease will use if it runs as asked: its GPUs times its hours."""
    return max(1, lr.gpus_per_vm * lr.instances) * lr.duration / 3600


def held_gpu_hours(holds: Iterable[Hold], now: int) -> dict[tuple[str, str], float]:
    """(project, model) -> the GPU-hours its holds keep from now to their ends (summed exactly:
    the same whatever order the holds come in, so two plans of one state order alike)."""
    parts: dict[tuple[str, str], list[float]] = defaultdict(list)
    for h in holds:
        if h.end > now and h.gpus > 0 and not h.preemptible:
            parts[(h.project_id, h.gpu_model)].append(h.gpus * (h.end - max(h.start, now)) / 3600)
    return {pm: math.fsum(xs) for pm, xs in parts.items()}


def _own_order(lr: LeaseRequest) -> tuple[int, int, int, str]:
    """A project's leases among themselves: priority desc, then asked first."""
    return -lr.priority, lr.created_at, lr.arrival, lr.lease_id


def _spared(lr: LeaseRequest, spared_gpus: int | None) -> bool:
    return spared_gpus is not None and lr.gpus_per_vm >= spared_gpus


def _own_queues(waiting: Iterable[LeaseRequest]) -> dict[tuple[str, str], list[LeaseRequest]]:
    """(project, model) -> its waiting leases that count (not preemptible), in its own order."""
    mine: dict[tuple[str, str], list[LeaseRequest]] = defaultdict(list)
    for lr in waiting:
        if not lr.preemptible:
            mine[(lr.project_id, lr.gpu_model)].append(lr)
    return {pm: sorted(leases, key=_own_order) for pm, leases in mine.items()}


def _ahead(held: float, leases: list[LeaseRequest]) -> list[float]:
    """What is committed ahead of each position of a project's own queue (the last: after all)."""
    totals = [held]
    for lr in leases:
        totals.append(totals[-1] + asked_gpu_hours(lr))
    return totals


def _charged(charge: float, ahead: float, pm: tuple[str, str], quotas: Mapping[tuple[str, str], QuotaLimit]) -> float:
    q = quotas.get(pm)
    weight = q.weight if q is not None else 1.0
    # a weight of 0 already scores inf (or 0 with no use): the charge changes neither
    return charge * ahead / weight if weight > 0 and ahead > 0 else 0.0


def queued_charges(waiting: Iterable[LeaseRequest], holds: Iterable[Hold], now: int,
                   quotas: Mapping[tuple[str, str], QuotaLimit], charge: float | None,
                   spared_gpus: int | None = None) -> dict[str, float]:
    """lease_id -> what the rule adds to its project's fair-share score: `charge` x (the GPU-hours
    its project's holds of its model keep from now on, and the asked GPU-hours of its project's
    waiting leases of its model that go before it among themselves: priority desc, then asked
    first), over the project's weight. Leases of `spared_gpus` GPUs per VM or more are not charged
    (they still count for the leases after them). Empty when the rule is off; preemptible leases
    neither pay nor are charged (they use no quota and yield to the rest)."""
    if charge is None:
        return {}
    held = held_gpu_hours(holds, now)
    out: dict[str, float] = {}
    for pm, leases in _own_queues(waiting).items():
        for lr, ahead in zip(leases, _ahead(held.get(pm, 0.0), leases)):
            out[lr.lease_id] = 0.0 if _spared(lr, spared_gpus) else _charged(charge, ahead, pm, quotas)
    return out


class NewLeaseCharge:
    """The charge a lease not among `waiting` would get with them: queued_charges([*waiting, lr],
    ...)[lr.lease_id], from its project's running totals (made once) rather than anew per lease."""

    def __init__(self, waiting: Iterable[LeaseRequest], holds: Iterable[Hold], now: int,
                 quotas: Mapping[tuple[str, str], QuotaLimit], charge: float | None,
                 spared_gpus: int | None = None):
        self._quotas, self._charge, self._spared_gpus = quotas, charge, spared_gpus
        # (project, model) -> its leases' own-order keys, and what is ahead of each position
        self._queues: dict[tuple[str, str], tuple[list[tuple[int, int, int, str]], list[float]]] = {}
        if charge is None:   # the rule off (the default): nothing to read
            return
        self._held = held_gpu_hours(holds, now)
        self._leases = _own_queues(waiting)
        for pm in self._held.keys() | self._leases.keys():
            leases = self._leases.setdefault(pm, [])
            self._queues[pm] = [_own_order(lr) for lr in leases], _ahead(self._held.get(pm, 0.0), leases)   # queued_charges' sums

    def __call__(self, lr: LeaseRequest) -> float:
        charge = self._charge
        if charge is None or lr.preemptible or _spared(lr, self._spared_gpus):
            return 0.0
        pm = (lr.project_id, lr.gpu_model)
        queue = self._queues.get(pm)
        if queue is None:
            return 0.0
        keys, totals = queue
        return _charged(charge, totals[bisect_left(keys, _own_order(lr))], pm, self._quotas)

    def add(self, lr: LeaseRequest) -> list[LeaseRequest]:
        """lr now waits too (it counts for its project's leases after it); the waiting leases whose
        charges that raised (those after it in its project's own order: none when it was asked
        after them, at no higher priority)."""
        if self._charge is None or lr.preemptible:
            return []
        pm = (lr.project_id, lr.gpu_model)
        leases = self._leases.setdefault(pm, [])
        key = _own_order(lr)
        keys = self._queues[pm][0] if pm in self._queues else []
        i = bisect_left(keys, key)
        leases.insert(i, lr)
        keys.insert(i, key)
        self._queues[pm] = keys, _ahead(self._held.get(pm, 0.0), leases)   # summed as queued_charges sums them
        # (a spared lease, or one of a project that weighs 0, is charged nothing whatever is ahead)
        return [x for x in leases[i + 1:] if not _spared(x, self._spared_gpus)
                and _charged(self._charge, 1.0, pm, self._quotas) > 0]

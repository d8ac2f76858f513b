"""Counter-offers: when a lease would wait, the alternatives that start sooner (another GPU
model with enough memory, fewer GPUs or VMs, a shorter lease in a gap, now by borrowing)
and the guaranteed later start, each with its exact start from the same plan.

Pure. Each alternative is a new lease tried alone (planner.Trials): placed after the waiting
leases the planner order puts before it, which are all its start depends on, so the start
offered is the one plan() gives when that lease is added to the waiting ones
(tests/property/test_offers_property.py). The work is bounded: one plan of the leases ahead
per GPU model tried, then at most `OfferRules.most_trials` single insertions.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .model import Hold, Host, LeaseRequest, PlannedLease, QuotaLimit
from .planner import PlannerSettings, Trials, bound_protected, fmt_time, order_key, trials_after


class Kind(StrEnum):
    GPU_MODEL = "gpu_model"              # the same size on another model with enough memory
    FEWER_GPUS = "fewer_gpus"            # a smaller shape of the same model
    FEWER_INSTANCES = "fewer_instances"  # fewer VMs of the same shape
    SHORTER = "shorter"                  # the longest lease that starts as asked, in a gap
    BORROW = "borrow"                    # now instead of a later asked start, beyond quota on idle GPUs
    LATER = "later"                      # reserved at the planned start: the GPUs are held for it


# when two offers start together, the one closer to the ask comes first
RANK = {k: i for i, k in enumerate(Kind)}


@dataclass(frozen=True)
class ShapeOption:
    """A shape a lease may ask for (not retired)."""
    name: str
    gpu_model: str
    gpus: int


@dataclass(frozen=True)
class OfferRules:
    # GPU memory per model (GB), the operator's: a model may stand in for another whose memory
    # it has at least; a model not listed stands in for none and has none standing in for it
    gpu_memory_gb: Mapping[str, float] = field(default_factory=dict)
    most: int = 5                  # offers shown at most
    shortest_share: float = 0.25   # a shorter lease is offered down to this share of the asked duration
    step: int = 60                 # a shorter duration is a whole number of these seconds
    sizes: int = 3                 # smaller sizes tried at most
    models: int = 3                # other GPU models tried at most

    @property
    def most_trials(self) -> int:
        """Bound on the insertions one ask costs: models, sizes, a binary search of the
        shorter durations (at most 2^40 steps long), the borrow and the later start."""
        return self.models + self.sizes + 42 + 2


@dataclass(frozen=True)
class Offer:
    kind: Kind
    shape: str
    gpu_model: str
    gpus_per_vm: int
    instances: int
    duration: int
    start: int          # its planned start
    reserve: bool       # asked to start exactly at `start` (a reservation); False: at the ask's own start
    borrowing: bool     # beyond the project's quota on idle GPUs: may be reclaimed

    def words(self, now: int, asked: LeaseRequest) -> str:
        """In a few words, what changes and when it starts."""
        when = "now" if self.start <= now else f"at {fmt_time(self.start)}"
        size = f"{self.instances} x {self.gpus_per_vm} {self.gpu_model}"
        if self.kind is Kind.GPU_MODEL:
            text = f"{self.gpu_model} instead of {asked.gpu_model} ({size}), {when}"
        elif self.kind in (Kind.FEWER_GPUS, Kind.FEWER_INSTANCES):
            text = f"{size} ({self.gpus_per_vm * self.instances} GPUs instead of " \
                   f"{asked.gpus_per_vm * asked.instances}), {when}"
        elif self.kind is Kind.SHORTER:
            text = f"{self.gpu_model} for {_hours(self.duration)} instead of {_hours(asked.duration)}, {when}"
        elif self.kind is Kind.LATER:
            text = f"{self.gpu_model} reserved {when}: the GPUs are held for it"
        else:
            text = f"{self.gpu_model} {when} instead of at {fmt_time(max(now, asked.earliest_start))}"
        return text + ("; borrowing idle GPUs beyond the quota, it may be reclaimed" if self.borrowing else "")


def offers(now: int, hosts: Sequence[Host], holds: Sequence[Hold], quotas: Mapping[tuple[str, str], QuotaLimit],
           waiting: Sequence[LeaseRequest], usage: Mapping[tuple[str, str], float] | None,
           settings: PlannerSettings, ask: LeaseRequest, shape: ShapeOption, shapes: Sequence[ShapeOption],
           rules: OfferRules = OfferRules()) -> list[Offer]:
    """The alternatives to `ask` (a new lease: created now, asked after every waiting one; not
    among `waiting`) when it would wait, best first: those that start sooner than it would,
    then its planned start reserved. Empty when it starts as asked."""
    trials = _Trials(now, hosts, holds, quotas, waiting, usage, settings)
    t0 = max(now, ask.earliest_start)
    planned = trials.place(ask)
    if planned.placement is not None and planned.placement.start <= t0:
        return []
    late = planned.placement.start if planned.placement is not None else None
    found: list[Offer] = []

    def keep(kind: Kind, lr: LeaseRequest, shape_name: str, reserve: bool = False) -> Offer | None:
        p = trials.place(lr)
        if p.placement is None or (late is not None and p.placement.start >= late and kind is not Kind.LATER):
            return None
        offer = Offer(kind, shape_name, lr.gpu_model, lr.gpus_per_vm, lr.instances, lr.duration,
                      p.placement.start, reserve, p.borrowing)
        found.append(offer)
        return offer

    memory = rules.gpu_memory_gb.get(ask.gpu_model)
    if memory is not None:
        others = {}   # one shape per model: the first by name
        for s in sorted(shapes, key=lambda s: s.name):
            if (s.gpu_model != ask.gpu_model and s.gpus == ask.gpus_per_vm and s.gpu_model not in others
                    and rules.gpu_memory_gb.get(s.gpu_model, -1.0) >= memory):
                others[s.gpu_model] = s
        for s in sorted(others.values(), key=lambda s: s.gpu_model)[:rules.models]:
            keep(Kind.GPU_MODEL, replace(ask, gpu_model=s.gpu_model), s.name)

    for kind, size_shape, n in _smaller(ask, shape, shapes)[:rules.sizes]:
        if keep(kind, replace(ask, gpus_per_vm=size_shape.gpus, instances=n), size_shape.name):
            break   # the largest that starts sooner

    d = _shorter(trials, ask, t0, rules)
    if d is not None:
        keep(Kind.SHORTER, replace(ask, duration=d), shape.name)

    if ask.earliest_start > now:
        borrowed = trials.place(replace(ask, earliest_start=now))
        if borrowed.borrowing:
            keep(Kind.BORROW, replace(ask, earliest_start=now, latest_start=None), shape.name, reserve=True)

    found.sort(key=lambda o: (o.start, RANK[o.kind]))
    found = found[:rules.most - (1 if late is not None else 0)]
    if late is not None:
        keep(Kind.LATER, replace(ask, earliest_start=late), shape.name, reserve=True)
    return found


def _smaller(ask: LeaseRequest, shape: ShapeOption, shapes: Sequence[ShapeOption]
             ) -> list[tuple[Kind, ShapeOption, int]]:
    """Smaller sizes of the same model, most GPUs first: fewer GPUs per VM (a smaller shape,
    as many VMs), or fewer VMs of the asked shape."""
    out: list[tuple[Kind, ShapeOption, int]] = []
    for s in shapes:
        if s.gpu_model == ask.gpu_model and s.gpus < ask.gpus_per_vm:
            out.append((Kind.FEWER_GPUS, s, ask.instances))
    for n in sorted({ask.instances - 1, ask.instances // 2, 1}, reverse=True):
        if 1 <= n < ask.instances:
            out.append((Kind.FEWER_INSTANCES, shape, n))
    return sorted(out, key=lambda o: (-o[1].gpus * o[2], o[1].name))


def _shorter(trials: _Trials, ask: LeaseRequest, t0: int, rules: OfferRules) -> int | None:
    """The longest duration, a whole number of steps, from the asked share up to less than
    the asked duration, that starts at t0; None: none does (a binary search: a shorter lease
    fits wherever a longer one does)."""
    step = rules.step
    lo = max(1, -(-int(ask.duration * rules.shortest_share) // step))   # in steps
    hi = (ask.duration - 1) // step
    if lo > hi or not _starts_at(trials, replace(ask, duration=lo * step), t0):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _starts_at(trials, replace(ask, duration=mid * step), t0):
            lo = mid
        else:
            hi = mid - 1
    return lo * step


def _starts_at(trials: _Trials, lr: LeaseRequest, t0: int) -> bool:
    p = trials.place(lr)
    return p.placement is not None and p.placement.start <= t0


class _Trials:
    """planner.Trials for a new lease of any model: per GPU model, one plan of the waiting
    leases the planner order puts before it (on that model's hosts and holds only: models
    share neither), kept for the next trial with the same leases ahead."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
                 usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings):
        self.now, self.quotas, self.usage, self.settings, self.waiting = now, quotas, usage, settings, waiting
        self.hosts: dict[str, list[Host]] = defaultdict(list)
        self.holds: dict[str, list[Hold]] = defaultdict(list)
        self.queued: dict[str, list[LeaseRequest]] = defaultdict(list)
        for h in hosts:
            self.hosts[h.gpu_model].append(h)
        for hd in holds:
            self.holds[hd.gpu_model].append(hd)
        for lr in waiting:
            self.queued[lr.gpu_model].append(lr)
        self.runs: dict[tuple[str, frozenset[str]], Trials] = {}
        self.ordered: dict[str, list[tuple[tuple[int, int, float, int, int, str], LeaseRequest]]] = {}
        self.count = 0

    def place(self, lr: LeaseRequest) -> PlannedLease:
        self.count += 1
        m = lr.gpu_model
        ahead = self._ahead(lr)
        ids = frozenset(x.lease_id for x in ahead)
        run = self.runs.get((m, ids))
        if run is None:
            run = self.runs[(m, ids)] = trials_after(self.now, self.hosts[m], self.holds[m], self.quotas, ahead,
                                                     self.usage, self.settings)
        return run.place(lr)

    def _ahead(self, lr: LeaseRequest) -> list[LeaseRequest]:
        """The waiting leases of its model the planner order puts before `lr`."""
        m = lr.gpu_model
        if self.settings.bounded:   # who is past the bound first depends on the leases there are
            protected = bound_protected([*self.waiting, lr], self.now, self.settings)
            mine = self._key(lr, protected)
            return [x for x in self.queued[m] if self._key(x, protected) < mine]
        ordered = self.ordered.get(m)
        if ordered is None:   # without a bound, a key depends on its own lease only: sorted once
            ordered = self.ordered[m] = sorted((self._key(x, None), x) for x in self.queued[m])
        mine = self._key(lr, None)
        return [x for _, x in ordered[:bisect_left(ordered, (mine,), key=lambda kx: (kx[0],))]]

    def _key(self, lr: LeaseRequest, protected: set[str] | None) -> tuple[int, int, float, int, int, str]:
        return order_key(lr, self.quotas, self.usage, self.now, self.settings, protected)


def _hours(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min"

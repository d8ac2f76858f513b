"""Counter-offers: when a lease would wait, the alternatives that start sooner (another GPU
model with enough memory, fewer GPUs or VMs, a shorter lease in a gap, now by borrowing)
and the guaranteed later start, each with its exact start from the same plan.

Pure. Each alternative is a new lease tried alone (planner.Trials) after the waiting leases
the planner order puts before it, which are all its start depends on, so the start offered
is the one plan() gives when that lease is added to the waiting ones
(tests/property/test_offers_property.py). The trials are taken inside the dry run's own plan,
at each alternative's place in the order (planner.Turn): the work is that one plan and at
most `OfferRules.most_trials` single insertions. Only a lease the order puts elsewhere than
its turn (with a wait bound set to 0) costs a plan of the leases ahead of it.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from .model import Hold, Host, LeaseRequest, Plan, PlannedLease, QuotaLimit
from .planner import (OrderKey, PlannerSettings, Trials, Turn, bound_protected, fmt_time, order_key, plan,
                      plan_with_turns, trials_after)
from .queued_charge import NewLeaseCharge, queued_charges


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

    def most_trials(self, duration: int) -> int:
        """Bound on the insertions one ask of `duration` costs: the ask itself, the other
        models, the smaller sizes, a binary search of the shorter durations, the borrow (a
        trial and its offer) and the reserved start."""
        return 1 + self.models + self.sizes + 1 + max(1, duration // self.step).bit_length() + 2 + 1


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


@dataclass
class Offered:
    plan: Plan            # the dry run's: the waiting leases and the ask
    offers: list[Offer]   # best first; empty when the ask starts as asked


def offers(now: int, hosts: Sequence[Host], holds: Sequence[Hold], quotas: Mapping[tuple[str, str], QuotaLimit],
           waiting: Sequence[LeaseRequest], usage: Mapping[tuple[str, str], float] | None,
           settings: PlannerSettings, ask: LeaseRequest, shape: ShapeOption, shapes: Sequence[ShapeOption],
           rules: OfferRules = OfferRules()) -> Offered:
    """The dry run of `ask` (a new lease: created now, asked after every waiting one; not among
    `waiting`), and, when it would wait, its alternatives, best first: those that start sooner
    than it would, then its planned start reserved.

    One plan: each alternative is tried in the dry run's own plan (planner.Turn), right where
    the planner order puts it, so it costs insertions, not a plan. A preemptible ask is offered
    nothing: it runs on idle GPUs only, out of quota, and a trial never places one."""
    if ask.preemptible:
        return Offered(plan(now, hosts, holds, quotas, [*waiting, ask], usage, settings), [])
    places = _Places(now, hosts, holds, quotas, waiting, usage, settings)
    own: list[_Tried] = []
    late: list[int | None] = []   # the ask's planned start, once its turn has come
    others: list[tuple[ShapeOption, _Tried]] = []

    def at_own_turn(trials: Trials) -> None:
        with places.taking(ask, trials):
            late.append(_own(places, ask, shape, shapes, rules, now, own))

    turns = [Turn(places.key(ask), at_own_turn)]
    for other in _stand_ins(ask, shapes, rules):
        lr = replace(ask, gpu_model=other.gpu_model)

        def at_its_turn(trials: Trials, lr: LeaseRequest = lr, other: ShapeOption = other) -> None:
            with places.taking(lr, trials):
                others.append((other, _Tried(Kind.GPU_MODEL, lr, other.name, False, places.place(lr))))
        turns.append(Turn(places.key(lr), at_its_turn))
    planned = plan_with_turns(now, hosts, holds, quotas, [*waiting, ask], usage, settings, turns)
    t0 = max(now, ask.earliest_start)
    asked = planned.leases[ask.lease_id].placement
    if asked is not None and asked.start <= t0:
        return Offered(planned, [])
    end = asked.start if asked is not None else None
    assert late == [end], (late, end)   # the trial at its turn is where the plan put it
    return Offered(planned, _best(own, others, end, rules))


def offers_after(now: int, place: Callable[[LeaseRequest], PlannedLease], ask: LeaseRequest, shape: ShapeOption,
                 shapes: Sequence[ShapeOption], rules: OfferRules = OfferRules()) -> list[Offer]:
    """The offers of `ask`, each tried by `place` alone after a plan that is already made (the
    incremental create's: plan_insert.PlanBook.trial, every lease of the plan before it). Where
    the full plan would put an alternative before some of those leases, it starts it no later
    than here (fewer leases ahead take no capacity away), so an offer is never earlier than
    offers() gives it; taking one re-checks it under the ledger lock. A preemptible ask: none."""
    if ask.preemptible:
        return []
    own: list[_Tried] = []
    end = _own(_After(place), ask, shape, shapes, rules, now, own)
    if end is not None and end <= max(now, ask.earliest_start):
        return []   # it starts as asked
    others = [(other, _Tried(Kind.GPU_MODEL, lr, other.name, False, place(lr)))
              for other in _stand_ins(ask, shapes, rules) for lr in [replace(ask, gpu_model=other.gpu_model)]]
    return _best(own, others, end, rules)


def _best(own: list[_Tried], others: list[tuple[ShapeOption, _Tried]], end: int | None,
          rules: OfferRules) -> list[Offer]:
    """The offers, best first: those that start sooner than the ask's `end` (its planned start),
    by start, then that start reserved."""
    found = [t.offer() for t in own if t.kind is not Kind.LATER]
    found += [t.offer() for _, t in sorted(others, key=lambda o: o[0].gpu_model) if t.sooner(end)]
    found.sort(key=lambda o: (o.start, RANK[o.kind]))
    found = found[:rules.most - (1 if end is not None else 0)]
    found += [t.offer() for t in own if t.kind is Kind.LATER]
    return found


@dataclass(frozen=True)
class _Tried:
    kind: Kind
    lr: LeaseRequest
    shape: str
    reserve: bool
    planned: PlannedLease

    def sooner(self, than: int | None) -> bool:
        place = self.planned.placement
        return place is not None and (than is None or place.start < than)

    def offer(self) -> Offer:
        lr, place = self.lr, self.planned.placement
        assert place is not None
        return Offer(self.kind, self.shape, lr.gpu_model, lr.gpus_per_vm, lr.instances, lr.duration, place.start,
                     self.reserve, self.planned.borrowing)


def _stand_ins(ask: LeaseRequest, shapes: Sequence[ShapeOption], rules: OfferRules) -> list[ShapeOption]:
    """A shape of each other model with at least the ask's GPU memory and as many GPUs per VM
    (the first by name), by model."""
    memory = rules.gpu_memory_gb.get(ask.gpu_model)
    if memory is None:
        return []
    found: dict[str, ShapeOption] = {}
    for s in sorted(shapes, key=lambda s: s.name):
        if (s.gpu_model != ask.gpu_model and s.gpus == ask.gpus_per_vm and s.gpu_model not in found
                and rules.gpu_memory_gb.get(s.gpu_model, -1.0) >= memory):
            found[s.gpu_model] = s
    return sorted(found.values(), key=lambda s: s.gpu_model)[:rules.models]


class _Placer(Protocol):
    def place(self, lr: LeaseRequest) -> PlannedLease: ...


@dataclass(frozen=True)
class _After:
    """Trials after a plan already made (offers_after)."""
    place: Callable[[LeaseRequest], PlannedLease]


def _own(places: _Placer, ask: LeaseRequest, shape: ShapeOption, shapes: Sequence[ShapeOption],
         rules: OfferRules, now: int, found: list[_Tried]) -> int | None:
    """The alternatives of the ask's own model, into `found`; returns the ask's planned start."""
    t0 = max(now, ask.earliest_start)
    planned = places.place(ask).placement
    late = planned.start if planned is not None else None
    if late is not None and late <= t0:
        return late

    def keep(kind: Kind, lr: LeaseRequest, shape_name: str, reserve: bool = False) -> bool:
        tried = _Tried(kind, lr, shape_name, reserve, places.place(lr))
        if tried.sooner(late) or (kind is Kind.LATER and tried.planned.placement is not None):
            found.append(tried)
            return True
        return False

    for kind, size_shape, n in _smaller(ask, shape, shapes)[:rules.sizes]:
        if keep(kind, replace(ask, gpus_per_vm=size_shape.gpus, instances=n), size_shape.name):
            break   # the largest that starts sooner
    d = _shorter(places, ask, t0, rules)
    if d is not None:
        keep(Kind.SHORTER, replace(ask, duration=d), shape.name)
    if ask.earliest_start > now:
        borrowed = replace(ask, earliest_start=now, latest_start=None)
        if places.place(borrowed).borrowing:
            keep(Kind.BORROW, borrowed, shape.name, reserve=True)
    if late is not None:
        keep(Kind.LATER, replace(ask, earliest_start=late), shape.name, reserve=True)
    return late


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


def _shorter(places: _Placer, ask: LeaseRequest, t0: int, rules: OfferRules) -> int | None:
    """The longest duration, a whole number of steps, from the asked share up to less than
    the asked duration, that starts at t0; None: none does (a binary search: a shorter lease
    fits wherever a longer one does)."""
    step = rules.step
    lo = max(1, -(-int(ask.duration * rules.shortest_share) // step))   # in steps
    hi = (ask.duration - 1) // step
    if lo > hi or not _starts_at(places, replace(ask, duration=lo * step), t0):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _starts_at(places, replace(ask, duration=mid * step), t0):
            lo = mid
        else:
            hi = mid - 1
    return lo * step


def _starts_at(places: _Placer, lr: LeaseRequest, t0: int) -> bool:
    p = places.place(lr)
    return p.placement is not None and p.placement.start <= t0


class _Places:
    """Where a new lease would be placed: in the turn of the dry run's plan taken for a lease
    of its GPU model and order key (planner.Turn), else (a lease the order puts elsewhere:
    with a wait bound, one past it or not) after a plan of the waiting leases ahead of it, on
    its model's hosts and holds only (models share neither), kept for the next such lease."""

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
        self.charged = queued_charges(waiting, holds, now, quotas, settings.queued_charge,
                                      settings.queued_charge_spares_gpus)
        self.charge_of = NewLeaseCharge(waiting, holds, now, quotas, settings.queued_charge,
                                        settings.queued_charge_spares_gpus)
        self.runs: dict[tuple[str, frozenset[str]], Trials] = {}
        self.ordered: dict[str, list[tuple[OrderKey, LeaseRequest]]] = {}
        self.turn: tuple[str, OrderKey, Trials] | None = None

    def key(self, lr: LeaseRequest) -> OrderKey:
        """Its key in the planner order, as plan() would give it among the waiting leases."""
        protected = bound_protected([*self.waiting, lr], self.now, self.settings) if self.settings.bounded else None
        return self._key(lr, protected)

    @contextmanager
    def taking(self, lr: LeaseRequest, trials: Trials) -> Iterator[None]:
        """While a turn of the plan lasts (its Trials hold only then): leases of lr's model and key."""
        self.turn = (lr.gpu_model, self.key(lr), trials)
        try:
            yield
        finally:
            self.turn = None

    def place(self, lr: LeaseRequest) -> PlannedLease:
        turn = self.turn
        if turn is not None and turn[0] == lr.gpu_model and turn[1][:-1] == self.key(lr)[:-1]:
            return turn[2].place(lr)
        m = lr.gpu_model
        ahead = self._ahead(lr)
        ids = frozenset(x.lease_id for x in ahead)
        run = self.runs.get((m, ids))
        if run is None:
            run = self.runs[(m, ids)] = trials_after(self.now, self.hosts[m], self.holds[m], self.quotas, ahead,
                                                     self.usage, self.settings, self.charged)
        return run.place(lr)

    def _ahead(self, lr: LeaseRequest) -> list[LeaseRequest]:
        """The waiting leases of its model the planner order puts before `lr`."""
        m = lr.gpu_model
        if self.settings.bounded:   # who is past the bound first depends on the leases there are
            protected = bound_protected([*self.waiting, lr], self.now, self.settings)
            mine = self._key(lr, protected)
            return [x for x in self.queued[m] if self._key(x, protected) < mine]
        ordered = self.ordered.get(m)
        if ordered is None:   # without a bound, a key depends on its own lease and the charges made once: sorted once
            ordered = self.ordered[m] = sorted((self._key(x, None), x) for x in self.queued[m])
        mine = self._key(lr, None)
        return [x for _, x in ordered[:bisect_left(ordered, (mine,), key=lambda kx: (kx[0],))]]

    def _key(self, lr: LeaseRequest, protected: set[str] | None) -> OrderKey:
        charged = self.charged
        if self.settings.queued_charge is not None and lr.lease_id not in charged:
            # a new lease (or a preemptible one: 0), charged as plan() charges it among the waiting leases
            charged = {lr.lease_id: self.charge_of(lr)}
        return order_key(lr, self.quotas, self.usage, self.now, self.settings, protected, charged=charged)


def _hours(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min"

"""Start-by: the plan's ETA with a margin learnt from how late the project's leases started.

A lease that waits is told the start the plan gives it now (its ETA). Under fair share that
start can move later: a lighter project's lease asked afterwards goes before it. How far it
moves depends mostly on whose lease it is (a project over its share is overtaken most), and
grows with how far off the ETA is. So the start-by is the ETA plus the planned wait times a
quantile (QUANTILE) of the project's recent lateness ratios: each lease's lateness over its
planned wait, for its last WINDOW leases that waited and started, and for its leases still
waiting past their ETA, at how late they are so far (without them the sample would miss the
latest leases exactly when lateness grows). A project with fewer than MIN_OWN such leases
uses everyone's. Nothing here changes a plan: it is what a lease is told beside its ETA.

A project's own history lags when its load turns: a burst of its leases is told the margin of
its last leases, which started on time, and is then overtaken as its own running raises its
fair-share score. So each sample also counts in its load class, how far the project's GPUs held
were above its fair part when the lease started (`load_class`), and a lease is told at least the
LOAD_QUANTILE of the last CLASS_WINDOW samples of its project's class now (`with_load`).

Pure and deterministic; epoch seconds in. The replay (bench/metrics.py) feeds StartBy the
events in time order and scores what each lease was told against its real start; the service
(engine/start_by_margins.py) computes each project's `margin` from the database now and then,
and tells each lease `start_by` beside its ETA.
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .model import Host

START, TELL = 0, 1   # events of one second: the starts first (known to a lease told then)
QUANTILE = 0.95   # the share of leases meant to start by their start-by
WINDOW = 100      # a project's last started leases that count, and at most this many overdue ones
MIN_OWN = 30      # a project with fewer samples than this uses everyone's
FLOOR = 60        # a planned wait shorter than this counts as this (the ratio's denominator)
# of a load class's samples (everyone's): at least this margin for its projects. Below QUANTILE: the
# project's own history still asks for that; a class's tail holds leases told a minute's wait and
# started hours late, and its 95th percentile told a tenth of the leases 2.6 days more on the whole
# final set at 80 % (the 90th: 16.5 h, against 14.5 h without classes; docs/performance.md)
LOAD_QUANTILE = 0.9
CLASS_WINDOW = 400     # a load class's last samples that count
LOW_LOAD = 0.25        # class 0: holding less than this part of its fair part; one class per doubling above
TOP_CLASS = 8          # the highest class (from 32 times its fair part on)


def waits_from(told_at: int, asked_start: int) -> int:
    """When the wait a lease is told begins: when it is told, or the start it asked for if later
    (a lease asked for next week plans no wait until then)."""
    return max(told_at, asked_start)


def lateness_ratio(told_at: int, eta: int, at: int) -> float:
    """How late a lease told `eta` at `told_at` is at `at` (its start, or now while it waits),
    over its planned wait."""
    return max(0, at - eta) / max(eta - told_at, FLOOR)


def quantile(sample: list[float], q: float) -> float:
    """The q-quantile of a sorted sample (the nearest rank at or above q; 0.0 when empty)."""
    if not sample:
        return 0.0
    return sample[min(len(sample) - 1, max(0, math.ceil(q * len(sample)) - 1))]


def margin(own: Sequence[float], overdue: Sequence[float], everyone: Sequence[float], q: float = QUANTILE,
           min_own: int = MIN_OWN) -> float:
    """The margin ratio of a project: the q-quantile of its started leases' ratios (`own`) and
    its overdue ones' so far (`overdue`); of everyone's started leases' and its overdue ones'
    while it has fewer than `min_own` of both."""
    sample = sorted([*own, *overdue] if len(own) + len(overdue) >= min_own else [*everyone, *overdue])
    return quantile(sample, q)


def load_class(held: float, fair: float) -> int:
    """How far a project's GPUs held now are above its fair part (its weight's share of the GPUs
    it may use): 0 below a quarter of it, then one class per doubling, at most TOP_CLASS."""
    if held <= 0 or held < fair * LOW_LOAD:
        return 0
    if fair <= 0:
        return TOP_CLASS
    return min(TOP_CLASS, math.floor(math.log2(held / (fair * LOW_LOAD))) + 1)


def model_gpus(hosts: Iterable[Host]) -> dict[str, float]:
    """The GPUs of each model on the hosts that take leases (enabled: up, not disabled or drained)."""
    out: dict[str, float] = {}
    for host in hosts:
        if host.enabled:
            out[host.gpu_model] = out.get(host.gpu_model, 0.0) + host.gpus
    return out


def fair_parts(weights: Mapping[tuple[str, str], float], capacity: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """Each (project, model)'s fair part of the model's GPUs: its quota weight's share of the
    weights there, times the model's GPUs."""
    total: dict[str, float] = {}
    for (_project, model), w in weights.items():
        total[model] = total.get(model, 0.0) + w
    return {(project, model): w / total[model] * capacity.get(model, 0.0) if w > 0 else 0.0
            for (project, model), w in weights.items()}


def load_classes(held: Mapping[tuple[str, str], float], weights: Mapping[tuple[str, str], float],
                 capacity: Mapping[str, float]) -> dict[str, int]:
    """Each project's load class now: `held` GPUs per (project, model), quota `weights` per
    (project, model), the GPUs of each model. Its class is its highest over its models (it is
    overtaken where it is furthest over its fair part). A project holding what it has no
    weight for is in the top class; one holding nothing is in class 0."""
    fair = fair_parts(weights, capacity)
    out: dict[str, int] = {project: 0 for project, _model in weights}
    for (project, model), gpus in held.items():
        out[project] = max(out.get(project, 0), load_class(gpus, fair.get((project, model), 0.0)))
    return out


class LoadTimeline:
    """Each project's load class over time (load_classes at every instant), from what its leases
    held: (project, model, GPUs, start, end) spans. `at(project, t)` counts what was held just
    before t, as the service knows it (a start's sample counts the holds before that pass's starts)."""

    def __init__(self, spans: Iterable[tuple[str, str, int, int, int]], weights: Mapping[tuple[str, str], float],
                 capacity: Mapping[str, float]):
        self.fair = fair_parts(weights, capacity)
        changes: dict[tuple[str, str], dict[int, int]] = {}
        for project, model, gpus, start, end in spans:
            at = changes.setdefault((project, model), {})
            at[start] = at.get(start, 0) + gpus
            at[end] = at.get(end, 0) - gpus
        self.steps: dict[str, list[tuple[str, list[int], list[int]]]] = {}   # project -> (model, times, held)
        for (project, model), at in changes.items():
            times = sorted(at)
            held, level = [], 0
            for t in times:
                level += at[t]
                held.append(level)
            self.steps.setdefault(project, []).append((model, times, held))

    def at(self, project: str, t: int) -> int:
        out = 0
        for model, times, held in self.steps.get(project, ()):
            i = bisect_left(times, t)
            out = max(out, load_class(held[i - 1] if i else 0, self.fair.get((project, model), 0.0)))
        return out


def with_load(ratio: float, by_class: Sequence[float], min_samples: int = MIN_OWN) -> float:
    """A project's margin ratio, raised to the LOAD_QUANTILE of its load class's samples (from
    `min_samples` of them on)."""
    if len(by_class) < min_samples:
        return ratio
    return max(ratio, quantile(sorted(by_class), LOAD_QUANTILE))


# what a project's margin ratio was learnt from (MarginBasis.source)
FROM_PROJECT, FROM_EVERYONE, FROM_LOAD_CLASS = "project", "everyone", "load_class"


@dataclass(frozen=True)
class MarginBasis:
    """A project's margin ratio and what it was learnt from, told beside its start-by: the
    QUANTILE of its own leases' ratios (FROM_PROJECT), of everyone's while it has fewer than MIN_OWN
    (FROM_EVERYONE), or the LOAD_QUANTILE of the leases that started in its load class now, where that
    asks more (FROM_LOAD_CLASS). `samples`: how many ratios it is the quantile of; `load_class`: the
    project's class now (None: not known)."""
    ratio: float
    source: str
    samples: int
    load_class: int | None = None

    @property
    def quantile(self) -> float:
        return LOAD_QUANTILE if self.source == FROM_LOAD_CLASS else QUANTILE


def margin_basis(own: Sequence[float], overdue: Sequence[float], everyone: Sequence[float],
                 by_class: Sequence[float] = (), load: int | None = None) -> MarginBasis:
    """margin() raised by with_load() (the class's ratios `by_class`, the project in class `load`),
    with what the ratio came from."""
    ratio = margin(own, overdue, everyone)
    if load is not None:
        raised = with_load(ratio, by_class)
        if raised > ratio:
            return MarginBasis(raised, FROM_LOAD_CLASS, len(by_class), load)
    if len(own) + len(overdue) >= MIN_OWN:
        return MarginBasis(ratio, FROM_PROJECT, len(own) + len(overdue), load)
    return MarginBasis(ratio, FROM_EVERYONE, len(everyone) + len(overdue), load)


def held_range(load: int) -> tuple[float, float | None]:
    """What a project in load class `load` holds, over its fair part: [low, high) (None: no bound)."""
    if load <= 0:
        return 0.0, LOW_LOAD
    low = LOW_LOAD * 2 ** (load - 1)
    return low, (None if load >= TOP_CLASS else low * 2)


def held_words(load: int) -> str:
    """What a project in load class `load` holds, over its fair part, in words."""
    low, high = held_range(load)
    if high is None:
        return f"at least {low:g} times its fair share of the GPUs"
    if low == 0:
        return f"less than {high:g} of its fair share of the GPUs"
    return f"{low:g} to {high:g} times its fair share of the GPUs"


def ratio_words(ratio: float) -> str:
    """A margin ratio as a person reads it: two figures below 1, one decimal above (never 1e+02)."""
    return f"{ratio:.2g}" if ratio < 1 else f"{ratio:.1f}".removesuffix(".0")


def basis_words(b: MarginBasis) -> str:
    """Why a start-by is as far past the ETA as it is: what its project's margin was learnt from
    when it was last computed (the leases still waiting past their ETA count as late as they are)."""
    if b.samples == 0:
        return "no lease that waited has started yet to learn a margin from: the start-by is the ETA"
    of_which = f"{b.quantile * 100:.0f} % of which started " + (
        "by their ETA" if b.ratio <= 0 else
        f"no later than their ETA plus {ratio_words(b.ratio)} times the wait they were told")
    if b.source == FROM_LOAD_CLASS:
        return (f"this project held {held_words(b.load_class or 0)} (load class {b.load_class}) when the margin "
                f"was computed, and leases at that load started later: the margin is learnt from the last "
                f"{b.samples} leases that waited at that load, {of_which}")
    if b.source == FROM_EVERYONE:
        return (f"this project has too few leases that waited, so the margin is learnt from everyone's last "
                f"{b.samples}, {of_which}")
    return f"the margin is learnt from this project's last {b.samples} leases that waited, {of_which}"


def start_by(told_at: int, eta: int, ratio: float) -> int:
    """What a lease told `eta` at `told_at` is told to start by, with the margin ratio `ratio`."""
    eta = max(eta, told_at)   # no ETA is before the moment it is told
    return eta + math.ceil(ratio * max(eta - told_at, FLOOR))


class StartBy:
    """What the leases of each project were told and when they started, as they happen."""

    def __init__(self, q: float = QUANTILE, window: int = WINDOW, min_own: int = MIN_OWN):
        if not 0 < q <= 1 or window < 1 or min_own < 0:
            raise ValueError("quantile in (0, 1], window >= 1, min_own >= 0")
        self.q, self.window, self.min_own = q, window, min_own
        self.own: dict[str, deque[float]] = {}                         # project -> its last ratios
        self.everyone: deque[float] = deque(maxlen=window)
        self.waiting: dict[str, list[tuple[int, str, int]]] = {}      # project -> (eta, lease, told_at), by ETA
        self.told: dict[str, tuple[str, int, int]] = {}               # lease -> (project, told_at, eta)
        self.by_class: dict[int, deque[float]] = {}                   # load class -> its last ratios

    def tell(self, project: str, lease_id: str, told_at: int, eta: int, load: int | None = None) -> int:
        """The start-by of a lease told `eta` at `told_at` (from what is known then), its project
        in load class `load` then (None: not known); from now on it waits, and counts as overdue
        once past its ETA, until it starts or is forgotten. Told again, the new ETA replaces the
        old. (A lease that already started is not told.)"""
        eta = max(eta, told_at)
        self.forget(lease_id)
        by = start_by(told_at, eta, self.margin_ratio(project, told_at, load))
        self.told[lease_id] = (project, told_at, eta)
        insort(self.waiting.setdefault(project, []), (eta, lease_id, told_at))
        return by

    def forget(self, lease_id: str) -> tuple[str, int, int] | None:
        """A waiting lease that will not start (cancelled, refused, expired) leaves the sample
        without being one: else, past its ETA, it would count as ever later. Returns what it was
        told (project, told_at, eta), None if it was not waiting."""
        told = self.told.pop(lease_id, None)
        if told is not None:
            project, told_at, eta = told
            queue = self.waiting[project]
            del queue[bisect_left(queue, (eta, lease_id, told_at))]
        return told

    def started(self, lease_id: str, start: int, load: int | None = None) -> None:
        """A lease told an ETA started (it counts if it waited past the moment it was told), its
        project in load class `load` then (None: not known, a sample of no class)."""
        told = self.forget(lease_id)
        if told is None:
            return
        project, told_at, eta = told
        if start <= told_at:   # it did not wait: not among the leases a start-by is for
            return
        ratio = lateness_ratio(told_at, eta, start)
        self.own.setdefault(project, deque(maxlen=self.window)).append(ratio)
        self.everyone.append(ratio)
        if load is not None:
            self.by_class.setdefault(load, deque(maxlen=CLASS_WINDOW)).append(ratio)

    def margin_ratio(self, project: str, now: int, load: int | None = None) -> float:
        """The quantile of the project's ratios now: its started leases', and its overdue ones'
        so far (the WINDOW whose ETAs passed last); everyone's started leases' instead while it
        has fewer than min_own; at least its load class's (with_load), in class `load` now."""
        queue = self.waiting.get(project, [])
        n_overdue = bisect_left(queue, (now,))   # ETA before now
        overdue = [lateness_ratio(told_at, eta, now)
                   for eta, _lease, told_at in queue[max(0, n_overdue - self.window):n_overdue]]
        ratio = margin(self.own.get(project, ()), overdue, self.everyone, self.q, self.min_own)
        return ratio if load is None else with_load(ratio, self.by_class.get(load, ()))


def told_start_bys(told: Iterable[tuple[str, str, int, int, int | None]],
                   model: StartBy | None = None, load_at: Callable[[str, int], int] | None = None) -> dict[str, int]:
    """The start-by each lease was told, from what had happened by then: `told` holds each lease
    told an ETA that waited, (project, lease, told_at, eta, start; None: it has not started),
    fed to the model in time order, a start before a tell at the same second; `load_at(project,
    t)`: the project's load class at t (None: no classes). lease -> start-by."""
    model = model or StartBy()
    events = []
    for project, lease, told_at, eta, start in told:
        events.append((told_at, TELL, lease, project, eta))
        if start is not None:
            events.append((start, START, lease, project, eta))
    events.sort(key=lambda e: e[:3])
    by = {}
    for t, kind, lease, project, eta in events:
        load = load_at(project, t) if load_at is not None else None
        if kind == TELL:
            by[lease] = model.tell(project, lease, t, eta, load)
        else:
            model.started(lease, t, load)
    return by

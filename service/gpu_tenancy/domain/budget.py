"""GPU-hour budgets per project and GPU model, per period (a calendar month, or
a custom range). Pure: the engine hands in the spans of GPUs held or planned.

A span counts as *used* for the part of it before `now`, and as *planned* for
the part after. A lease that ends early is cut in the ledger, so what it did
not use is given back without anything more here.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from .calendar import overlap

MONTH = "month"
RANGE = "range"
EPSILON = 1e-6   # GPU-hours: float sums must not refuse a lease that fits exactly


@dataclass(frozen=True)
class Budget:
    budget_id: str
    project_id: str
    gpu_model: str
    gpu_hours: float
    period: str                 # "month" (every calendar month, UTC) or "range"
    start: int | None = None    # the range, for "range"
    end: int | None = None


@dataclass(frozen=True)
class Span:
    """GPUs held (or planned) over [start, end)."""
    gpus: int
    start: int
    end: int


@dataclass(frozen=True)
class BudgetUse:
    budget: Budget
    start: int          # the period
    end: int
    used: float         # GPU-hours before now
    planned: float      # GPU-hours committed or asked for after now

    @property
    def left(self) -> float:
        return self.budget.gpu_hours - self.used - self.planned


def month_of(t: int) -> tuple[int, int]:
    d = datetime.fromtimestamp(t, timezone.utc)
    first = datetime(d.year, d.month, 1, tzinfo=timezone.utc)
    nxt = datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=timezone.utc)
    return int(first.timestamp()), int(nxt.timestamp())


def periods(b: Budget, start: int, end: int) -> list[tuple[int, int]]:
    """The budget's periods that overlap [start, end), in time order."""
    if b.period == RANGE:
        assert b.start is not None and b.end is not None  # a range budget has both (checked when made)
        return [(b.start, b.end)] if overlap(b.start, b.end, start, end) > 0 else []
    out = []
    t = start
    while t < end:
        p = month_of(t)
        out.append(p)
        t = p[1]
    return out


def use(b: Budget, period: tuple[int, int], spans: Iterable[Span], now: int) -> BudgetUse:
    a, z = period
    used = planned = 0
    for s in spans:
        used += s.gpus * overlap(s.start, s.end, a, min(z, now))
        planned += s.gpus * overlap(s.start, s.end, max(a, now), z)
    return BudgetUse(b, a, z, used / 3600, planned / 3600)


def refusals(budgets: Sequence[Budget], spans: Sequence[Span], asked: Span, now: int) -> list[str]:
    """Why `asked` (a new lease, or the added part of an extension) would pass a budget;
    empty when it fits. `spans` are the project's other holds and waiting leases of the model."""
    out = []
    for b in budgets:
        for period in periods(b, asked.start, asked.end):
            need = asked.gpus * overlap(asked.start, asked.end, *period) / 3600
            u = use(b, period, spans, now)
            if need > u.left + EPSILON:
                out.append(_words(b, period, need, u))
    return out


def move_refusals(budgets: Sequence[Budget], spans: Sequence[Span], old: Sequence[Span], new: Span,
                  now: int) -> list[str]:
    """Why moving a lease's hours from `old` to `new` (a parked lease's held slot moved sooner)
    would pass a budget; empty when it fits. `spans` are the project's holds and waiting leases
    of the model, `old` among them. Only a period the move adds hours to is checked, and only
    what it adds: a move within a period, or out of one, never passes it, even where the engine
    or a lowered budget left it past its budget already."""
    out = []
    for b in budgets:
        for period in periods(b, new.start, new.end):
            need = (new.gpus * overlap(new.start, new.end, *period)
                    - sum(o.gpus * overlap(o.start, o.end, *period) for o in old)) / 3600
            if need <= EPSILON:
                continue
            u = use(b, period, spans, now)
            if need > u.left + EPSILON:
                out.append(_words(b, period, need, u, "more"))
    return out


def _words(b: Budget, period: tuple[int, int], need: float, u: BudgetUse, more: str = "") -> str:
    return (f"it needs {hours(need)} {more + ' ' if more else ''}{b.gpu_model} GPU-hours in {describe(period)}; "
            f"project {b.project_id}'s budget there is {hours(b.gpu_hours)}: {hours(u.used)} used, "
            f"{hours(u.planned)} planned, {hours(max(u.left, 0.0))} left")


def hours(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def describe(period: tuple[int, int]) -> str:
    a, z = period
    if (a, z) == month_of(a):
        return datetime.fromtimestamp(a, timezone.utc).strftime("%B %Y")
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return (f"{datetime.fromtimestamp(a, timezone.utc).strftime(fmt)} to "
            f"{datetime.fromtimestamp(z, timezone.utc).strftime(fmt)}")

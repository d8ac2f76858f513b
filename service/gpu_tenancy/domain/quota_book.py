"""The planner's quota book: per (project, GPU model), the nominal quota left over time. Pure."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from typing import Protocol

from . import scan_index
from .model import Hold, QuotaLimit
from .profile import StepProfile

__all__ = ["QuotaBook", "QuotaQuestions"]


class QuotaProfile(Protocol):
    """A project's remaining quota over time: StepProfile, or the compiled Steps (the same values)."""

    def add(self, start: int, end: int, delta: int) -> None: ...
    def earliest_fit(self, t0: int, duration: int, need: int) -> int | None: ...
    def min_on(self, start: int, end: int) -> int: ...
    def value_at(self, t: int) -> int: ...
    def least(self) -> int: ...
    def times_between(self, a: int, b: int) -> list[int]: ...


def quota_profile(origin: int, value: int, spans: Sequence[tuple[int, int, int]]) -> QuotaProfile:
    """The compiled step function where it is built (each reservation of a plan lands in one of
    these: in C it is an insert into two arrays), else StepProfile."""
    if scan_index.available and -scan_index.MOST_GPUS <= value <= scan_index.MOST_GPUS \
            and all(-scan_index.MOST_GPUS <= d <= scan_index.MOST_GPUS for _, _, d in spans):
        return scan_index.Steps(origin, value, spans)
    return StepProfile.of_spans(origin, value, spans)


class QuotaQuestions(Protocol):
    """What a plan asks of its quota book (plan_run.py, plan_insert.py): QuotaBook's answers, or
    the brute-force reference's (bench/naive_planner.py: NaiveQuota), checked against this."""

    now: int

    def earliest(self, p: str, m: str, t: int, d: int, need: int) -> int | None: ...
    def min_remaining(self, p: str, m: str, a: int, b: int) -> int: ...
    def reserve(self, p: str, m: str, a: int, b: int, need: int) -> None: ...
    def note_planned(self, reserved: Sequence[Hold]) -> None: ...
    def overtakes(self, p: str, m: str, a: int, b: int, need: int) -> bool: ...


class QuotaBook:
    """Per (project, model): remaining nominal quota over time."""

    def __init__(self, now: int, quotas: Mapping[tuple[str, str], QuotaLimit], holds: Sequence[Hold]):
        self.now = now
        self.quotas = quotas
        self.profs: dict[tuple[str, str], QuotaProfile] = {}
        # at most the lowest remaining quota anywhere in the profile: while it covers a
        # lease, the lease fits at once without walking the profile (a reserve lowers it
        # by its GPUs; the true lowest is read again only when it no longer covers one)
        self.floor: dict[tuple[str, str], int] = {}
        # the holds' quota use, made into a profile only for the (project, model) a lease asks about
        self.held: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
        # this plan's reservations that start later than now, per (project, model): GPUs planned
        # over time (a borrower must not push them back: `overtakes`); None: not kept, as the
        # project may not borrow
        self.planned: dict[tuple[str, str], QuotaProfile | None] = {}
        for h in holds:
            if h.end > now and h.gpus > 0 and not h.preemptible:   # preemptible leases use no quota
                self.held[(h.project_id, h.gpu_model)].append((h.start, h.end, -h.gpus))

    def _prof(self, p: str, m: str) -> QuotaProfile:
        pr = self.profs.get((p, m))
        if pr is None:
            q = self.quotas.get((p, m))
            pr = self.profs[(p, m)] = quota_profile(self.now, q.gpus if q else 0, self.held.pop((p, m), []))
            self.floor[(p, m)] = pr.least()
        return pr

    def earliest(self, p: str, m: str, t: int, d: int, need: int) -> int | None:
        prof = self._prof(p, m)
        if self.floor[(p, m)] < need:
            self.floor[(p, m)] = prof.least()
        if self.floor[(p, m)] >= need:
            return t if t > self.now else self.now
        return prof.earliest_fit(t, d, need)

    def min_remaining(self, p: str, m: str, a: int, b: int) -> int:
        return self._prof(p, m).min_on(a, b)

    def reserve(self, p: str, m: str, a: int, b: int, need: int) -> None:
        self._prof(p, m).add(a, b, -need)
        if b > max(a, self.now):
            self.floor[(p, m)] -= need
        if a > self.now:
            self._planned(p, m, a, b, need)

    def note_planned(self, reserved: Sequence[Hold]) -> None:
        """Placements of the plan handed in as holds (a plan book rebuilt from them, an earlier
        plan's head taken over), already counted against the quota: those that start later than
        now are planned leases too, which a borrower must not push back."""
        for h in reserved:
            if h.start > self.now and h.end > h.start and h.gpus > 0 and not h.preemptible:
                self._planned(h.project_id, h.gpu_model, h.start, h.end, h.gpus)

    def _planned(self, p: str, m: str, a: int, b: int, gpus: int) -> None:
        """`gpus` planned for the project over [a, b), kept only where it may borrow (nobody
        else asks: a plan with no quota that lends keeps none)."""
        key = (p, m)
        if key in self.planned:
            planned = self.planned[key]
        else:
            q = self.quotas.get(key)
            planned = self.planned[key] = quota_profile(self.now, 0, []) if q is not None and q.borrow_gpus > 0 else None
        if planned is not None:
            planned.add(a, b, gpus)

    def overtakes(self, p: str, m: str, a: int, b: int, need: int) -> bool:
        """Would `need` GPUs held over [a, b) push back a lease this plan placed later for the
        project? Once held, a lease counts against the quota before every planned one, so at an
        instant where the project has a lease planned it must fit within what the quota has left
        (a borrower placed after them in the order otherwise moves them to its end)."""
        planned = self.planned.get((p, m))
        if planned is None:
            return False
        left = self._prof(p, m)
        instants = {a, *planned.times_between(a, b), *left.times_between(a, b)}
        return any(planned.value_at(t) > 0 and left.value_at(t) < need for t in instants)

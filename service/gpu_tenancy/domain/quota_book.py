"""The planner's quota book: per (project, GPU model), the nominal quota left over time. Pure."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from .model import Hold, QuotaLimit
from .profile import StepProfile

__all__ = ["QuotaBook"]


class QuotaBook:
    """Per (project, model): remaining nominal quota over time."""

    def __init__(self, now: int, quotas: Mapping[tuple[str, str], QuotaLimit], holds: Sequence[Hold]):
        self.now = now
        self.quotas = quotas
        self.profs: dict[tuple[str, str], StepProfile] = {}
        # at most the lowest remaining quota anywhere in the profile: while it covers a
        # lease, the lease fits at once without walking the profile (a reserve lowers it
        # by its GPUs; the true lowest is read again only when it no longer covers one)
        self.floor: dict[tuple[str, str], int] = {}
        # the holds' quota use, made into a profile only for the (project, model) a lease asks about
        self.held: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
        for h in holds:
            if h.end > now and h.gpus > 0 and not h.preemptible:   # preemptible leases use no quota
                self.held[(h.project_id, h.gpu_model)].append((h.start, h.end, -h.gpus))

    def _prof(self, p: str, m: str) -> StepProfile:
        pr = self.profs.get((p, m))
        if pr is None:
            q = self.quotas.get((p, m))
            pr = self.profs[(p, m)] = StepProfile.of_spans(self.now, q.gpus if q else 0,
                                                           self.held.pop((p, m), ()))
            self.floor[(p, m)] = min(pr.vals)
        return pr

    def earliest(self, p: str, m: str, t: int, d: int, need: int) -> int | None:
        prof = self._prof(p, m)
        if self.floor[(p, m)] < need:
            self.floor[(p, m)] = min(prof.vals)
        if self.floor[(p, m)] >= need:
            return t if t > self.now else self.now
        return prof.earliest_fit(t, d, need)

    def min_remaining(self, p: str, m: str, a: int, b: int) -> int:
        return self._prof(p, m).min_on(a, b)

    def reserve(self, p: str, m: str, a: int, b: int, need: int) -> None:
        self._prof(p, m).add(a, b, -need)
        if b > max(a, self.now):
            self.floor[(p, m)] -= need

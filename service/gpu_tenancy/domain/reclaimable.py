"""Which borrowers may be reclaimed: the rule that a borrower is ended early only while its
project holds beyond its nominal quota, counted when it would end (the notice's end), not now.

A lease is marked borrowing when it starts (its project then held more than its nominal
quota). By the notice's end, the leases that made it borrow may have ended (their own end, or an
earlier notice's), and so may borrowers decided before it in the same pass: then it borrows
nothing any more and is kept, as /v1/share tells. Counted there:

- the leases of the project running now (started, `start <= now`; a lease only planned may yet
  move) whose own end (the hold's end less the release allowance) is not before the deadline:
  they run the second before it, as the borrower does;
- less every borrower this pass took for the leases examined before.

A borrower is takeable while what is left so counted is more than the nominal quota (itself
included: taking it may leave the project below its quota). The set ended for one lease is
chosen among the takeable ones as a whole (the fewest that make room: reclaim._fewest). Preemptible leases hold
outside quota and are not counted. Pure: the engine (engine/early_ends.py) and the replay
(whatif/reclaims.py) both reach it only through domain/reclaim.early_ends, on the holds each
reads, so they cannot part on the rule."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .model import Hold, QuotaLimit

__all__ = ["Excess"]


class Excess:
    """Per (project, model): GPUs held beyond the nominal quota by the deadline, as borrowers
    are taken (a project with no quota for the model: all it holds is beyond)."""

    def __init__(self, holds: Sequence[Hold], quotas: Mapping[tuple[str, str], QuotaLimit], now: int,
                 deadline: int):
        self.now, self.deadline = now, deadline
        held: dict[tuple[str, str], int] = defaultdict(int)
        for h in holds:
            if self.counted(h):
                held[(h.project_id, h.gpu_model)] += h.gpus
        self.beyond = {key: gpus - (quotas[key].gpus if key in quotas else 0) for key, gpus in held.items()}

    def counted(self, h: Hold) -> bool:
        """Running now, and still running the second before the deadline."""
        return not h.preemptible and h.start <= self.now and h.end - h.allowance >= self.deadline

    def over(self, project: str, model: str) -> bool:
        """Does the project still hold beyond its nominal quota at the deadline?"""
        return self.beyond.get((project, model), 0) > 0

    def take(self, hs: Iterable[Hold]) -> None:
        """A borrower (its holds) is ended at the deadline: it no longer counts."""
        for h in hs:
            if self.counted(h):
                self.beyond[(h.project_id, h.gpu_model)] -= h.gpus

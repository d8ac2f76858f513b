"""The engine's reclaim in the replay (engine/early_ends.py, decided by domain/reclaim.py): after a
plan, borrowing jobs are told to end at the notice's end so that a lease within its project's quota
starts then, and a lease that a later reclaim will make room for is told that start.

What the engine keeps in its rows is kept here: which running jobs are under notice (they are not
taken again, and hold their GPUs only until the notice ends), and which projects yielded GPUs to
which (no reclaim goes back the other way while the lease reclaimed for is not over). A notice
whose lease started meanwhile is called off as the engine calls it off (whatif/reclaim_passes.call_off)."""
from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import replace

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, Plan, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.reclaim import EarlyEnd, EarlyEndPlan, ReclaimSettings, early_ends


class Reclaims:
    def __init__(self, settings: ReclaimSettings):
        self.settings = settings
        self.noticed: dict[str, int] = {}   # jid -> the end its notice gave it
        self.noticed_for: dict[str, str] = {}   # jid under notice -> the lease it makes room for
        # victim jid -> (its project, the beneficiary's project, the beneficiary's jid)
        self.yielded: dict[str, tuple[str, str, str]] = {}
        self.cuts: list[tuple[str, int]] = []   # decided, not yet handed to the event loop
        self.uncuts: list[str] = []               # called off, likewise

    def takeable(self, running: Iterable[str], borrowing: set[str]) -> frozenset[str]:
        """The running jobs the engine may end early: borrowing, not under notice already."""
        return frozenset(j for j in running if j in borrowing and j not in self.noticed)

    def decide(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
               quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
               usage: Mapping[tuple[str, str], float] | None, current: Plan, takeable: frozenset[str],
               planner_settings: PlannerSettings) -> EarlyEndPlan:
        """What the engine's replan decides after `current`; the ends are noted as under notice."""
        decided = early_ends(now, hosts, holds, quotas, waiting, usage, current, self.settings,
                             takeable=takeable - self.noticed.keys(),
                             yielded=frozenset((p, other) for p, other, _ in self.yielded.values()),
                             planner_settings=planner_settings)
        for end in decided.ends:
            self.notice(end)
        return decided

    def notice(self, end: EarlyEnd) -> None:
        """A running job is told to end at end.at (the event loop is told)."""
        self.noticed[end.lease_id] = end.at
        self.noticed_for[end.lease_id] = end.for_lease
        self.cuts.append((end.lease_id, end.at))
        if end.kind == "reclaimed":
            self.yielded[end.lease_id] = (end.project_id, end.for_project, end.for_lease)

    def cut(self, jid: str, holds: list[Hold]) -> list[Hold]:
        """A job's holds, ended at its notice's end if it is under one (as apply() cuts the ledger's)."""
        at = self.noticed.get(jid)
        return holds if at is None else [replace(h, end=min(h.end, at)) for h in holds]

    def unneeded(self, waiting: Container[str], arrival: Mapping[str, int]) -> list[str]:
        """The jobs under notice whose lease no longer waits (it started), in the order the engine
        checks them (engine/early_ends.call_off_unneeded: by notice's end, then by when asked)."""
        return sorted((jid for jid, b in self.noticed_for.items() if b not in waiting),
                      key=lambda jid: (self.noticed[jid], arrival[jid], jid))

    def call_off(self, jid: str) -> None:
        """jid's notice is called off: it ends when it would have (the event loop is told). A cut
        the event loop was not told yet is taken back instead: the event loop takes a decision's
        call-offs before its cuts, so that a job called off and noticed again in one decision
        (its lease started, then it is reclaimed for another) ends at the new notice's end."""
        del self.noticed[jid], self.noticed_for[jid]
        self.yielded.pop(jid, None)
        pending = [c for c in self.cuts if c[0] != jid]
        if len(pending) < len(self.cuts):
            self.cuts = pending
        else:
            self.uncuts.append(jid)

    def finished(self, jid: str) -> None:
        """A job ended: it is no longer under notice, and if a reclaim was made for it, the
        projects that yielded to it may reclaim from its project again."""
        self.noticed.pop(jid, None)
        self.noticed_for.pop(jid, None)
        for victim in [v for v, (_p, _other, b) in self.yielded.items() if b == jid]:
            del self.yielded[victim]

    def take_cuts(self) -> list[tuple[str, int]]:
        out, self.cuts = self.cuts, []
        return out

    def take_uncuts(self) -> list[str]:
        out, self.uncuts = self.uncuts, []
        return out

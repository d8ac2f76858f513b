"""A host's free-GPU profile and its runs: for a number of GPUs g, the
maximal intervals during which the host has at least g free.

A run is (start, end, free_at_start), end INF for "forever". Runs are kept
only for the g the planner has asked about (``track``), and a reservation
recomputes only the runs that meet its window (``after_reserve``): free GPUs
only go down, so runs only shrink or split, and only inside the window.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from .model import Host
from .profile import INF, StepProfile

Run = tuple[int, int, int]     # (start, end, free GPUs at start)


def runs_at_least(prof: StepProfile, g: int, cap: int) -> list[Run]:
    """The runs of >= g free in prof, in order; free counts above cap
    (the host's size) count as cap."""
    vals = prof.vals
    least = min(vals)
    if least >= g:   # (often so for small g: one run, all the time; read at C speed)
        return [(prof.times[0], INF, vals[0] if vals[0] < cap else cap)]
    out: list[Run] = []
    if max(vals) < g:   # (often so for big g: none)
        return out
    is_open, s, f = False, 0, 0   # the run open so far: its start and free GPUs at the start
    for t, v in zip(prof.times, vals):
        if v >= g:
            if not is_open:
                is_open, s, f = True, t, (v if v < cap else cap)
        elif is_open:
            out.append((s, t, f))
            is_open = False
    if is_open:
        out.append((s, INF, f))
    return out


class HostState:
    """A host's profile, its runs per tracked g, and when it goes idle."""

    __slots__ = ("name", "gpus", "aggregate", "prof", "runs", "run_lists", "idle_from")

    def __init__(self, host: Host, origin: int, prof: StepProfile | None = None):
        """prof: the host's free GPUs, if not all free (StepProfile.of_spans of its holds)."""
        self.name = host.name
        self.gpus = host.gpus
        self.aggregate = host.aggregate
        self.prof = prof if prof is not None else StepProfile(origin, host.gpus)
        # runs[g]: the set of g-runs (liveness checks); run_lists[g]: the same, in order
        # (untracked g share one empty set and list: track() gives a g its own before anything is added)
        self.runs: list[set[Run]] = [set()] * (host.gpus + 1)
        self.run_lists: list[list[Run]] = [[]] * (host.gpus + 1)
        self.idle_from = origin    # from here on the host is entirely free

    def compute_idle_from(self) -> int:
        p = self.prof
        return p.times[-1] if p.vals[-1] >= self.gpus else INF

    def track(self, g: int) -> list[Run]:
        """Start keeping the g-runs; returns them."""
        rs = self.run_lists[g] = runs_at_least(self.prof, g, self.gpus)
        self.runs[g] = set(rs)
        return rs

    def after_reserve(self, g: int, lo: int, end: int, least_after: int) -> list[Run]:
        """Bring the g-runs up to date after the profile lost GPUs on
        [lo, end), where it now has at least least_after free. Returns the
        runs added (the dropped ones are no longer in ``runs[g]``)."""
        L = self.run_lists[g]
        if g <= least_after:
            # the one run holding the window keeps its ends; only a run that
            # starts at lo sees its free-at-start drop
            i = bisect_right(L, (lo, INF + 1)) - 1
            old = L[i]
            s, e, f = old
            if s < lo:
                return []
            v = self.prof.value_at(s)
            run = (s, e, v if v < self.gpus else self.gpus)
            if run == old:
                return []
            L[i] = run
            live = self.runs[g]
            live.discard(old)
            if run in live:   # pragma: no cover - runs of one g never overlap
                return []
            live.add(run)
            return [run]
        i = bisect_left(L, (lo,))
        if i > 0 and L[i - 1][1] > lo:
            i -= 1
        j = bisect_left(L, (end,), i)
        if i == j:
            return []
        return self._swap(g, i, j, self._runs_across(g, lo, end, L[i], L[j - 1][1]))

    def _runs_across(self, g: int, lo: int, end: int, first: Run, last_end: int) -> list[Run]:
        """The g-runs over the old runs first .. (ending at last_end) that met
        [lo, end): outside the window the profile did not change, so only the
        window's segments are read."""
        opened = (first[0], first[2]) if first[0] < lo else None
        times, vals = self.prof.times, self.prof.vals
        G = self.gpus
        new: list[Run] = []
        k = bisect_right(times, lo) - 1
        n = len(times)
        while k < n and times[k] < end:
            v = vals[k]
            if v >= g:
                if opened is None:
                    opened = (times[k], v if v < G else G)
            elif opened is not None:
                new.append((opened[0], times[k], opened[1]))
                opened = None
            k += 1
        if opened is not None:   # open at the window's end: it runs on as before
            new.append((opened[0], last_end, opened[1]))
        elif last_end > end:     # closed in the window, open again after it
            v = vals[k]          # times[k] == end: the value rises there
            new.append((end, last_end, v if v < G else G))
        return new

    def _swap(self, g: int, i: int, j: int, new: list[Run]) -> list[Run]:
        L = self.run_lists[g]
        old = L[i:j]
        if old == new:
            return []
        L[i:j] = new
        # only the runs that changed: a run kept as it was stays live, with its heap entry
        # (runs of one g never overlap, so no other live run equals a new one; the lists
        # are short, so `in` compares a few tuples instead of hashing them)
        live = self.runs[g]
        for r in old:
            if r not in new:
                live.discard(r)
        added = [r for r in new if r not in old]
        live.update(added)
        return added

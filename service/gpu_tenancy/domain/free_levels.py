"""Which hosts have exactly v GPUs free at instant t.

Every segment of every host's free-GPU profile (a maximal interval of one
value) is listed under its value, in lists per length class sorted by
(start, host name, end). A segment of class c is shorter than 64 * 2**c
seconds, so the segments of a class that contain t all start in
(t - 64 * 2**c, t]: a query reads only that slice, not every host.

The last segment of an idle host (all GPUs free forever) is left out: the
model index keeps idle hosts apart (``IdleHosts``), and counting them here
would put most hosts of a far-future query in the slice.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from itertools import compress

from .profile import INF, NCLS, StepProfile, length_class

TOP = NCLS - 1
CLASSES = range(NCLS)

Segment = tuple[int, int, int]   # (start, end, free GPUs)


def indexed_segments(prof: StepProfile, gpus: int, lo: int, hi: int) -> list[Segment]:
    """The segments of prof that touch [lo, hi] and belong in the index:
    some GPU free, and not the host's idle-forever tail."""
    times, vals = prof.times, prof.vals
    n = len(times)
    k = bisect_left(times, lo) - 1
    if k < 0:
        k = 0
    out = []
    while k < n and times[k] <= hi:
        v = vals[k]
        end = times[k + 1] if k + 1 < n else INF
        if v > 0 and not (end >= INF and v >= gpus):
            out.append((times[k], end, v))
        k += 1
    return out


class FreeLevels:
    """Segments per free value (0..max_gpus) and length class."""

    __slots__ = ("lists",)

    def __init__(self, max_gpus: int):
        # lists[v][c]: sorted (start, host name, end) of segments with v free
        self.lists: list[list[list[tuple[int, str, int]]]] = [
            [[] for _ in range(NCLS)] for _ in range(max_gpus + 1)]

    def add(self, name: str, seg: Segment) -> None:
        a, b, v = seg
        insort(self.lists[v][length_class(b - a)], (a, name, b))

    def remove(self, name: str, seg: Segment) -> None:
        a, b, v = seg
        L = self.lists[v][length_class(b - a)]
        del L[bisect_left(L, (a, name, b))]

    def replace(self, name: str, old: list[Segment], new: list[Segment]) -> None:
        """A host's segments `old` became `new`; both in time order, so one
        merge finds what left and what came. (add and remove inline, with
        length_class: this runs for every reservation.)"""
        lists = self.lists
        i = j = 0
        n_old, n_new = len(old), len(new)
        while i < n_old or j < n_new:
            if j >= n_new or (i < n_old and old[i] < new[j]):
                a, b, v = old[i]
                c = ((b - a) >> 6).bit_length()   # segments are never empty
                L = lists[v][c if c < NCLS else TOP]
                del L[bisect_left(L, (a, name, b))]
                i += 1
            elif i >= n_old or new[j] < old[i]:
                a, b, v = new[j]
                c = ((b - a) >> 6).bit_length()
                insort(lists[v][c if c < NCLS else TOP], (a, name, b))
                j += 1
            else:   # the same segment before and after
                i += 1
                j += 1

    def sort(self) -> None:
        for per_class in self.lists:
            for L in per_class:
                L.sort()

    def least_name_at(self, v: int, t: int, fits: Callable[[str, int], bool]) -> str | None:
        """Least host name among hosts with exactly v free at t for which
        fits(name, segment_end) holds (it is asked only for names that
        would improve the answer)."""
        best = None
        per_class = self.lists[v]
        for c in compress(CLASSES, per_class):   # the non-empty classes only (most are empty)
            L = per_class[c]
            k = bisect_left(L, (t - (64 << c) + 1,)) if c < TOP else 0
            n = len(L)
            while k < n:   # a walk, not a second bisect: the slice is short
                a, name, b = L[k]
                if a > t:
                    break
                if b > t and (best is None or name < best) and fits(name, b):
                    best = name
                k += 1
        return best

"""A step function of time: the free GPUs of a host, or a project's remaining quota.

A :class:`StepProfile` runs from an origin (``now``) to infinity, kept as two
parallel sorted lists: ``times[i]`` is where segment i starts and ``vals[i]``
its value until ``times[i+1]`` (the last segment runs forever).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

INF = 1 << 62          # "forever" for run and segment ends
NCLS = 26              # length classes: 64 s * 2**k; the last one takes the rest


def length_class(length: int) -> int:
    """Class of a run or duration length: runs of a class above cls(d) all
    hold d; runs of a class below it never do."""
    if length <= 0:
        return 0
    c = (length >> 6).bit_length()
    return c if c < NCLS else NCLS - 1


class StepProfile:
    """Piecewise-constant function of time on [origin, infinity)."""

    __slots__ = ("times", "vals")

    def __init__(self, origin: int, value: int):
        self.times: list[int] = [origin]
        self.vals: list[int] = [value]

    @classmethod
    def of_spans(cls, origin: int, value: int, spans: Iterable[tuple[int, int, int]]) -> StepProfile:
        """`value`, plus delta on each (start, end, delta): the profile add() gives span by
        span, built at once (one sort instead of a list insert per span)."""
        change: dict[int, int] = {}
        get = change.get   # (bound once: a plan builds a profile per host with holds)
        first = value      # the value at the origin: spans that start by then go straight into it
        for a, b, d in spans:
            if a <= origin:
                if b <= origin or d == 0:
                    continue
                first += d
            else:
                if b <= a or d == 0:
                    continue
                change[a] = get(a, 0) + d
            if b < INF:
                change[b] = get(b, 0) - d
        prof = cls(origin, first)
        times, vals = prof.times, prof.vals
        v = vals[0]
        for t in sorted(change):
            d = change[t]
            if d:   # equal neighbours merged, as add() leaves them
                v += d
                times.append(t)
                vals.append(v)
        return prof

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"StepProfile({list(zip(self.times, self.vals))})"

    @property
    def origin(self) -> int:
        return self.times[0]

    def value_at(self, t: int) -> int:
        i = bisect_right(self.times, t) - 1
        return self.vals[i if i > 0 else 0]

    def add(self, start: int, end: int, delta: int) -> None:
        """Add delta on [start, end) (clipped to the origin)."""
        times, vals = self.times, self.vals
        if start < times[0]:
            start = times[0]
        if end <= start or delta == 0:
            return
        i = bisect_right(times, start) - 1
        if times[i] != start:
            i += 1
            times.insert(i, start)
            vals.insert(i, vals[i - 1])
        if end >= INF:
            j = len(times)
        else:
            j = bisect_right(times, end) - 1
            if times[j] != end:
                j += 1
                times.insert(j, end)
                vals.insert(j, vals[j - 1])
        for k in range(i, j):
            vals[k] += delta
        # merge equal neighbours at the two edges
        if j < len(times) and vals[j] == vals[j - 1]:
            del times[j], vals[j]
        if i > 0 and vals[i] == vals[i - 1]:
            del times[i], vals[i]

    def values_on(self, start: int, end: int) -> list[int]:
        """The values of the segments that meet [start, end)."""
        times = self.times
        i = max(bisect_right(times, start) - 1, 0)
        j = bisect_right(times, end - 1) if end < INF else len(times)
        return self.vals[i:max(j, i + 1)]

    def min_on(self, start: int, end: int) -> int:
        """Minimum value over [start, end)."""
        return min(self.values_on(start, end))

    def least(self) -> int:
        """The least value anywhere."""
        return min(self.vals)

    def times_between(self, a: int, b: int) -> list[int]:
        """The segment starts t with a < t < b."""
        times = self.times
        return times[bisect_right(times, a):bisect_left(times, b)]

    def max_on(self, start: int, end: int) -> int:
        """Maximum value over [start, end)."""
        return max(self.values_on(start, end))

    def earliest_fit(self, t0: int, duration: int, need: int) -> int | None:
        """Earliest t >= t0 with value >= need on all of [t, t+duration)."""
        times, vals = self.times, self.vals
        n = len(times)
        if t0 < times[0]:
            t0 = times[0]
        i = bisect_right(times, t0) - 1
        cand = t0
        while i < n:
            seg_end = times[i + 1] if i + 1 < n else INF
            if vals[i] < need:
                if i + 1 >= n:
                    return None
                cand = seg_end
            elif seg_end - cand >= duration:
                return cand
            i += 1
        return None

    def first_below(self, t0: int, level: int) -> int | None:
        """First time >= t0 at which the value is below level (None: never)."""
        times, vals = self.times, self.vals
        i = bisect_right(times, t0) - 1
        if i < 0:
            i = 0
        for k in range(i, len(times)):
            if vals[k] < level:
                return max(times[k], t0)
        return None

    def next_break(self, t: int) -> int | None:
        """First breakpoint strictly after t."""
        i = bisect_right(self.times, t)
        return self.times[i] if i < len(self.times) else None

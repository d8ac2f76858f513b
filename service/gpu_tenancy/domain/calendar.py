"""Free GPUs of one host over a window, as a step function, and the overlap
arithmetic usage figures need. Pure: epoch seconds in, tuples out."""
from __future__ import annotations

from collections.abc import Iterable


def overlap(start: int, end: int, window_start: int, window_end: int) -> int:
    """Seconds of [start, end) that fall inside [window_start, window_end)."""
    return max(0, min(end, window_end) - max(start, window_start))


def free_steps(capacity: int, holds: Iterable[tuple[int, int, int]], start: int, end: int
               ) -> list[tuple[int, int, int]]:
    """Free GPUs of a host with `capacity` GPUs over [start, end), given its
    holds as (hold_start, hold_end, gpus): a list of (from, to, free) steps
    that covers the window exactly, with equal neighbours merged."""
    if end <= start:
        return []
    change: dict[int, int] = {}
    for hold_start, hold_end, gpus in holds:
        lo, hi = max(hold_start, start), min(hold_end, end)
        if lo >= hi or gpus == 0:
            continue
        change[lo] = change.get(lo, 0) - gpus
        change[hi] = change.get(hi, 0) + gpus
    steps: list[tuple[int, int, int]] = []
    free, at = capacity, start
    for t in sorted(change):
        if t > at:
            _append(steps, at, t, free)
            at = t
        free += change[t]
    if at < end:
        _append(steps, at, end, free)
    return steps


def _append(steps: list[tuple[int, int, int]], frm: int, to: int, free: int) -> None:
    """Add a step, or lengthen the last one when it has the same free count."""
    if steps and steps[-1][2] == free and steps[-1][1] == frm:
        steps[-1] = (steps[-1][0], to, free)
    else:
        steps.append((frm, to, free))

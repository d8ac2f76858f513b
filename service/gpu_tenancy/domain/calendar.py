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
    return [(frm, to, free) for frm, to, free, _ in calendar_steps(capacity, holds, (), start, end)]


def calendar_steps(capacity: int, holds: Iterable[tuple[int, int, int]], planned: Iterable[tuple[int, int, int]],
                   start: int, end: int) -> list[tuple[int, int, int, int]]:
    """As free_steps, with the GPUs planned for waiting leases (`planned`, in the same form)
    apart: (from, to, free, planned) steps, free being what is neither held nor planned."""
    if end <= start:
        return []
    change: dict[int, list[int]] = {}
    for sign, spans in ((0, holds), (1, planned)):
        for span_start, span_end, gpus in spans:
            lo, hi = max(span_start, start), min(span_end, end)
            if lo >= hi or gpus == 0:
                continue
            change.setdefault(lo, [0, 0])[sign] += gpus
            change.setdefault(hi, [0, 0])[sign] -= gpus
    steps: list[tuple[int, int, int, int]] = []
    held = booked = 0
    at = start
    for t in sorted(change):
        if t > at:
            _append(steps, (at, t, capacity - held - booked, booked))
            at = t
        held, booked = held + change[t][0], booked + change[t][1]
    if at < end:
        _append(steps, (at, end, capacity - held - booked, booked))
    return steps


def _append(steps: list[tuple[int, int, int, int]], step: tuple[int, int, int, int]) -> None:
    """Add a step, or lengthen the last one when it has the same figures."""
    if steps and steps[-1][2:] == step[2:] and steps[-1][1] == step[0]:
        steps[-1] = (steps[-1][0], step[1], step[2], step[3])
    else:
        steps.append(step)

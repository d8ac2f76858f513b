"""Extension rules beside the planner's "delays nobody" check
(planner.extension_conflicts): an optional window at the end of a lease in
which alone it may be extended (Chameleon allows the final 48 hours)."""
from __future__ import annotations

from .planner import _dur, fmt_time


def window_refusal(now: int, end: int, window: int | None) -> str | None:
    """Why an extension asked for at `now` of a lease ending at `end` is too early; None: in time."""
    if window is None or now >= end - window:
        return None
    return (f"a lease may be extended only in its last {_dur(window)}; this one ends at {fmt_time(end)}, "
            f"so ask from {fmt_time(end - window)}")

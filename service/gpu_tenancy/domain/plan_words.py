"""The words the planner's reasons are made of: times, counts and durations. Pure."""
from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["fmt_time", "plural", "duration_text"]


_DAYS: dict[int, str] = {}   # day number -> "YYYY-MM-DD": a plan formats thousands of times on few days


_MINUTES = [f"T{m // 60:02d}:{m % 60:02d}:" for m in range(1440)]   # a plan's reasons format ~one time per lease
_SECONDS = [f"{s:02d}Z" for s in range(60)]


def fmt_time(t: int) -> str:
    """RFC 3339 UTC, e.g. 2026-12-01T14:20:00Z."""
    day, s = divmod(int(t), 86400)
    date = _DAYS.get(day)
    if date is None:
        if len(_DAYS) > 4096:
            _DAYS.clear()
        date = _DAYS[day] = datetime.fromtimestamp(day * 86400, timezone.utc).strftime("%Y-%m-%d")
    m, s = divmod(s, 60)
    return date + _MINUTES[m] + _SECONDS[s]


def plural(k: int, word: str) -> str:
    """E.g. "1 lease", "3 leases"."""
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def duration_text(s: int) -> str:
    """In whole days, hours or minutes where it is one, else seconds: "2 days", "90 minutes"."""
    if s % 86400 == 0:
        return plural(s // 86400, "day")
    if s % 3600 == 0:
        return plural(s // 3600, "hour")
    if s % 60 == 0:
        return plural(s // 60, "minute")
    return plural(s, "second")

"""Template filters: times as people read them, durations, reasons."""
from __future__ import annotations

from gpu_tenancy.dashboard import bp
from gpu_tenancy.timeutil import parse_time


def relative(seconds: int) -> str:
    """'in 2 h 5 min', '3 min ago', 'now'."""
    ahead = seconds >= 0
    seconds = abs(seconds)
    if seconds < 60:
        return "now"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes and not days else ""]
    text = " ".join(p for p in parts if p)
    return f"in {text}" if ahead else f"{text} ago"


def span(seconds: int | None) -> str:
    if not seconds:
        return ""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    return " ".join(p for p in (f"{days} d" if days else "", f"{hours} h" if hours else "",
                                f"{minutes} min" if minutes else "") if p) or f"{seconds} s"


@bp.app_template_filter("when")
def when(value: str | None, now: int | None = None) -> str:
    """An RFC 3339 time from the API as 'YYYY-MM-DD HH:MM UTC'."""
    if not value:
        return "—"
    return value.replace("T", " ")[:16] + " UTC"


@bp.app_template_filter("from_now")
def from_now(value: str | None, now: int) -> str:
    if not value:
        return ""
    return relative(parse_time(value) - now)


bp.add_app_template_filter(span, "span")

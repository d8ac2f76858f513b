"""Template filters: times and durations as people read them."""
from __future__ import annotations

import re

from markupsafe import Markup, escape

from gpu_tenancy.dashboard import bp
from gpu_tenancy.timeutil import parse_time


def _in_words(seconds: int, *, minutes_after_days: bool) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "",
             f"{minutes} min" if minutes and (minutes_after_days or not days) else ""]
    return " ".join(p for p in parts if p)


def relative(seconds: int) -> str:
    """'in 2 h 5 min', '3 min ago', 'now' (days drop the minutes)."""
    if abs(seconds) < 60:
        return "now"
    text = _in_words(abs(seconds), minutes_after_days=False)
    return f"in {text}" if seconds > 0 else f"{text} ago"


@bp.app_template_filter("span")
def span(seconds: int | None) -> str:
    """A duration: '1 d 2 h 30 min'."""
    if not seconds:
        return ""
    return _in_words(int(seconds), minutes_after_days=True) or f"{seconds} s"


@bp.app_template_filter("when")
def when(value: str | None) -> Markup:
    """An RFC 3339 time from the API as 'YYYY-MM-DD HH:MM UTC', in a <time> element whose
    datetime static/localtime.js reads to add the reader's local time beside it."""
    if not value:
        return Markup("—")
    return Markup('<time datetime="{}">{}</time>').format(value, utc_text(value))


RFC3339_IN_TEXT = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@bp.app_template_filter("times_in")
def times_in(text: str | None) -> Markup:
    """A sentence from the API (a queue reason) with each RFC 3339 time in it written as
    `when` writes one, so the reader sees its local time too; the rest escaped."""
    if not text:
        return Markup("")
    parts, last = [], 0
    for found in RFC3339_IN_TEXT.finditer(text):
        parts += [escape(text[last:found.start()]), when(found.group(0))]
        last = found.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts)


def utc_text(value: str) -> str:
    """An RFC 3339 time as 'YYYY-MM-DD HH:MM UTC', plain (in a sentence)."""
    return value.replace("T", " ")[:16] + " UTC"


@bp.app_template_filter("from_now")
def from_now(value: str | None, now: int) -> str:
    return relative(parse_time(value) - now) if value else ""

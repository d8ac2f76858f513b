"""RFC 3339 times and durations (ISO 8601, 24h, Slurm's D-HH:MM:SS) at the edges; epoch
seconds inside; durations spoken in days and hours wherever a person reads them."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import overload

import isodate

from gpu_tenancy import error_codes as codes
from gpu_tenancy.errors import BadRequest

# Times outside these years are refused: before the epoch is no one's lease, and
# after 9999 cannot be written back as RFC 3339.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)


@overload
def rfc3339(epoch: int) -> str: ...
@overload
def rfc3339(epoch: int | None) -> str | None: ...


def rfc3339(epoch: int | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_stored(value: datetime | None) -> str | None:
    """A time as the database keeps it (naive, UTC) in RFC 3339: the same text as
    rfc3339(to_epoch(value)), without the round trip through epoch seconds (a page
    of leases formats hundreds)."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.isoformat(timespec="seconds") + "Z"


def parse_time(text: str) -> int:
    """An RFC 3339 time with an offset (a time without one is refused: ambiguous)."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"'{text}' is not an RFC 3339 time such as 2026-12-01T14:00:00Z") from None
    if value.tzinfo is None:
        raise ValueError(f"'{text}' has no time zone; add Z or an offset such as +02:00")
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"'{text}' is not between 1970 and 9998")
    return int(value.timestamp())


# A bare number is seconds (the API's first form), but "duration": 24 meaning a day and
# making a 24-second lease is the trap a person falls into: below a minute it needs a unit.
SHORTEST_BARE_SECONDS = 60
DURATION_FORMS = "PT24H, P2D, 24h, 90m, 7d, 1-00:00:00 (days-hours:minutes:seconds) or 24:00:00"
_UNIT_SECONDS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_WITH_UNIT = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,6})?)\s*(s|m|min|h|d|w)\s*$", re.IGNORECASE)
# Slurm's --time forms that name hours: D-HH, D-HH:MM, D-HH:MM:SS, HH:MM:SS (MM:SS and a bare
# MM are Slurm's too, but "90:00" read as minutes surprises more people than it helps)
_SLURM = re.compile(r"^\s*(?:(\d{1,5})-(\d{1,2})(?::(\d{1,2}))?(?::(\d{1,2}))?|(\d{1,7}):(\d{1,2}):(\d{1,2}))\s*$")


def parse_duration(value: str | int) -> int:
    """A duration in seconds, from ISO 8601 (PT24H, P2D, P1DT12H), a number with a unit
    (24h, 90m, 7d), Slurm's [D-]HH:MM:SS (1-00:00:00, 36:00:00), or whole seconds (60 or more);
    positive."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"a duration is text such as {DURATION_FORMS}")
    if isinstance(value, int):
        seconds = value
        if 0 < seconds < SHORTEST_BARE_SECONDS:
            raise ValueError(f"a bare number is seconds, and {seconds} s is surely not meant: give a unit, "
                             f"such as {seconds}h or PT{seconds}H")
    elif value.strip().isdigit():
        return parse_duration(int(value))
    elif match := _WITH_UNIT.match(value):
        seconds = int(float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()])
    elif match := _SLURM.match(value):
        days, hours, minutes, secs, h2, m2, s2 = match.groups()
        if days is not None:
            d, h, mi, se = int(days), int(hours), int(minutes or 0), int(secs or 0)
        else:
            d, h, mi, se = 0, int(h2), int(m2), int(s2)
        if (days is not None and h > 23) or mi > 59 or se > 59:
            raise ValueError(f"'{value}' is not a [days-]hours:minutes:seconds duration such as 1-00:00:00")
        seconds = ((d * 24 + h) * 60 + mi) * 60 + se
    else:
        seconds = _iso_seconds(value)
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


def time_field(where: str, text: str, code: str = codes.BAD_TIME) -> int:
    """parse_time for a value a request gave: a 400 naming where it was ("start",
    "query parameter since") when it is not a time. The one reader of request times."""
    try:
        return parse_time(text)
    except ValueError as exc:
        raise BadRequest(f"{where}: {exc}", code) from None


# Blazar's request times: UTC without a zone, to the minute ("2026-12-24 18:00"), or "now"
# (the form its answers and notices give them in is domain/blazar.py's)
BLAZAR_ASKED = "%Y-%m-%d %H:%M"


def blazar_time_field(where: str, text: object, code: str = codes.BAD_TIME) -> int:
    """A time a Blazar request gave (not "now": the caller reads that), as epoch seconds;
    a 400 in Blazar's own words when it is not one. The one reader of Blazar's times."""
    try:
        parsed = datetime.strptime(text, BLAZAR_ASKED) if isinstance(text, str) else None
    except ValueError:
        parsed = None
    if parsed is None or not EARLIEST <= parsed.replace(tzinfo=timezone.utc) < LATEST:
        shown = str(text)[:64] if isinstance(text, (str, int, float)) else type(text).__name__
        raise BadRequest(f"{shown} is an invalid date. Required format: {BLAZAR_ASKED}", code)
    return int(parsed.replace(tzinfo=timezone.utc).timestamp())


def duration_field(where: str, value: str | int) -> int:
    """parse_duration for a value a request gave: a 400 naming where it was when it is
    not a duration. The one reader of request durations."""
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise BadRequest(f"{where}: {exc}", codes.BAD_DURATION) from None


def _iso_seconds(value: str) -> int:
    try:
        parsed = isodate.parse_duration(value)
    except (isodate.ISO8601Error, ValueError):
        raise ValueError(f"'{value}' is not a duration; give one such as {DURATION_FORMS}") from None
    except OverflowError:   # more days than a date can count
        raise ValueError(f"'{value}' is longer than any lease") from None
    if not isinstance(parsed, timedelta):  # years and months have no fixed length
        raise ValueError(f"'{value}' uses years or months; give days or hours instead")
    return int(parsed.total_seconds())


def spoken_duration(seconds: int | float) -> str:
    """A duration as a person reads it in a message: '7 days', '20 days 20 h', '5 h 36 min',
    '90 s' (the two largest units, the smaller dropped when zero)."""
    total = int(round(seconds))
    if total < 120:
        return f"{total} s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        head = "1 day" if days == 1 else f"{days} days"
        return f"{head} {hours} h" if hours else head
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min"


def iso_duration(seconds: int) -> str:
    return isodate.duration_isoformat(timedelta(seconds=seconds))

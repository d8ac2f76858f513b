"""RFC 3339 times and ISO 8601 durations at the edges; epoch seconds inside."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import isodate

# Times outside these years are refused: before the epoch is no one's lease, and
# after 9999 cannot be written back as RFC 3339.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)


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


def parse_duration(value: str | int) -> int:
    """ISO 8601 (PT24H, P2D, P1DT12H) or whole seconds; positive."""
    if isinstance(value, bool):
        raise ValueError("a duration is ISO 8601 such as PT24H, or a number of seconds")
    if isinstance(value, int):
        seconds = value
    else:
        try:
            parsed = isodate.parse_duration(value)
        except (isodate.ISO8601Error, ValueError):
            raise ValueError(f"'{value}' is not an ISO 8601 duration such as PT24H or P2D") from None
        except OverflowError:   # more days than a date can count
            raise ValueError(f"'{value}' is longer than any lease") from None
        if not isinstance(parsed, timedelta):  # years and months have no fixed length
            raise ValueError(f"'{value}' uses years or months; give days or hours instead")
        seconds = int(parsed.total_seconds())
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


def iso_duration(seconds: int) -> str:
    return isodate.duration_isoformat(timedelta(seconds=seconds))

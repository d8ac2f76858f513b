"""rfc3339_stored formats a stored time without the round trip through epoch
seconds: it must give the very text the round trip gives."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.timeutil import EARLIEST, LATEST, rfc3339, rfc3339_stored


def test_it_is_the_round_trip_through_epoch_seconds():
    rng = random.Random(7)
    lo, hi = int(EARLIEST.timestamp()), int(LATEST.timestamp()) - 1
    stamps = [utcnow_naive(rng.randint(lo, hi)) for _ in range(2000)]
    stamps += [utcnow_naive(lo), utcnow_naive(hi), datetime(2026, 12, 1, 8, 0, 0, 999_999)]
    for value in stamps:
        assert rfc3339_stored(value) == rfc3339(to_epoch(value)), value


def test_an_aware_time_is_written_in_utc_and_none_stays_none():
    aware = datetime(2026, 12, 1, 10, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339_stored(aware) == "2026-12-01T08:30:05Z"
    assert rfc3339_stored(None) is None

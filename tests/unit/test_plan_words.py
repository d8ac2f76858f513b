"""The planner's words for times and durations, against the standard library's."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from gpu_tenancy.domain.plan_words import duration_text, fmt_time


@pytest.mark.parametrize("seed", range(5))
def test_a_time_in_words_is_rfc3339_utc(seed):
    rng = random.Random(seed)
    for _ in range(2000):
        t = rng.choice([rng.randrange(0, 4_102_444_800), rng.randrange(1_700_000_000, 1_900_000_000)])
        want = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert fmt_time(t) == want, t


def test_edges_of_a_day():
    assert fmt_time(0) == "1970-01-01T00:00:00Z"
    assert fmt_time(86399) == "1970-01-01T23:59:59Z"
    assert fmt_time(86400) == "1970-01-02T00:00:00Z"


def test_a_duration_in_its_largest_whole_unit():
    assert [duration_text(s) for s in (86400, 2 * 86400, 3600, 5400, 60, 61)] == [
        "1 day", "2 days", "1 hour", "90 minutes", "1 minute", "61 seconds"]

"""Durations as people write them (issue 19, trap 2): ISO 8601, a number with a unit, Slurm's
[D-]HH:MM:SS; a bare number is seconds and must be a minute or more; and durations spoken
back in days and hours (trap 3)."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.timeutil import iso_duration, parse_duration, spoken_duration

H, D = 3600, 86400


@pytest.mark.parametrize("text, seconds", [
    ("PT24H", D), ("P2D", 2 * D), ("P1DT12H", 36 * H), ("PT6S", 6),         # ISO 8601 (short ones on purpose)
    ("24h", D), ("90m", 90 * 60), ("90min", 90 * 60), ("7d", 7 * D), ("2w", 14 * D), ("1.5h", 90 * 60),
    (" 24H ", D),
    ("1-00:00:00", D), ("36:00:00", 36 * H), ("1-12", 36 * H), ("1-12:30", 36 * H + 1800),  # Slurm --time
    ("0-00:01:30", 90), (3600, H), ("3600", H), (60, 60),
])
def test_every_form_a_person_writes_is_read(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("value, says", [
    (24, "give a unit, such as 24h"), ("24", "give a unit, such as 24h"), (59, "give a unit"),
    ("1-25:00:00", "hours:minutes:seconds"), ("10:61:00", "hours:minutes:seconds"),
    ("soon", "such as PT24H, P2D, 24h"), ("P1M", "years or months"), (0, "positive"), ("0h", "positive"),
    ("PT-1H", "duration"), (True, "a duration is text"), (1.5, "a duration is text"), ("24 hours", "such as"),
])
def test_what_cannot_be_meant_is_refused_with_the_forms_to_use(value, says):
    with pytest.raises(ValueError, match=says.replace("[", r"\[")):
        parse_duration(value)


@pytest.mark.parametrize("seconds, spoken", [
    (45, "45 s"), (600, "10 min"), (20160, "5 h 36 min"), (7200, "2 h"), (D, "1 day"), (D + H, "1 day 1 h"),
    (604800, "7 days"), (1800000, "20 days 20 h"),
])
def test_durations_are_spoken_in_days_hours_and_minutes(seconds, spoken):
    assert spoken_duration(seconds) == spoken


def test_every_form_reads_back_the_same_seconds_seeded():
    """For 2,000 random durations, each written form (ISO 8601, unit, Slurm) reads back to it."""
    rng = random.Random(19)
    for _ in range(2000):
        seconds = rng.randrange(60, 400 * D)
        days, rest = divmod(seconds, D)
        hours, rest = divmod(rest, H)
        minutes, secs = divmod(rest, 60)
        assert parse_duration(iso_duration(seconds)) == seconds
        assert parse_duration(f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}") == seconds
        assert parse_duration(f"{days * 24 + hours}:{minutes:02d}:{secs:02d}") == seconds
        assert parse_duration(f"{seconds // 60}m") == seconds - secs

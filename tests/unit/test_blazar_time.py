"""Blazar's times, read (timeutil) and written (domain/blazar.py): a time written as Blazar's answers
write it reads back (as blazarclient reads it) to the same instant, and a minute asked
is that minute; what is not a time is a 400 in Blazar's words."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from gpu_tenancy.errors import BadRequest
from gpu_tenancy.domain.blazar import SHOWN as BLAZAR_SHOWN, date as blazar_stamp
from gpu_tenancy.timeutil import LATEST, BLAZAR_ASKED, blazar_time_field


def test_asked_minutes_read_to_epoch_and_show_back_seeded():
    rng = random.Random(21)
    for _ in range(500):
        minute = rng.randrange(0, int(LATEST.timestamp()) // 60) * 60
        asked = datetime.fromtimestamp(minute, timezone.utc).strftime(BLAZAR_ASKED)
        assert blazar_time_field("start_date", asked) == minute
        shown = blazar_stamp(minute)
        assert datetime.strptime(shown, BLAZAR_SHOWN).replace(tzinfo=timezone.utc).timestamp() == minute
        stored = datetime.fromtimestamp(minute, timezone.utc).replace(tzinfo=None)
        assert blazar_stamp(stored) == shown


@pytest.mark.parametrize("text", ["Bogus-date 13:13", "2026-12-01T09:00:00Z", "2026-12-01 09:00:30",
                                  "2026-13-01 09:00", "", "now", 20261201, None, ["2026-12-01 09:00"]])
def test_what_is_not_a_blazar_time_is_refused_in_blazar_s_words(text):
    with pytest.raises(BadRequest, match="is an invalid date. Required format: %Y-%m-%d %H:%M"):
        blazar_time_field("start_date", text)

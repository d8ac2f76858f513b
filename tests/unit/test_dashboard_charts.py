"""The admin figures' charts: a wait axis reads in units people use, each tick its own value."""
from __future__ import annotations

import random
import re

from gpu_tenancy.dashboard import admin, charts

TICK = re.compile(r'class="axis" text-anchor="end">([^<]*)<')


def wait_ticks(p50: float, p90: float) -> list[str]:
    chart = admin.FIGURES["wait_by_day"][2]([{"day": "2026-12-01", "p50_wait_seconds": p50,
                                              "p90_wait_seconds": p90}])
    return TICK.findall(chart)


def test_wait_ticks_under_a_minute_are_not_all_zero_minutes():
    """Every tick of a 20 s wait axis read "0 min" before."""
    assert wait_ticks(10, 20) == ["0 s", "5 s", "10 s", "15 s", "20 s"]


def test_wait_ticks_take_the_unit_the_longest_wait_spans():
    assert wait_ticks(600, 1500) == ["0 min", "10 min", "20 min", "30 min", "40 min"]
    assert wait_ticks(3 * 3600, 5 * 3600) == ["0 h", "2 h", "4 h", "6 h", "8 h"]
    assert wait_ticks(3 * 86400, 9 * 86400) == ["0 d", "2.5 d", "5 d", "7.5 d", "10 d"]


def test_seeded_wait_axes_have_five_distinct_ticks_of_one_unit_covering_the_longest():
    rng = random.Random(19)
    for _ in range(500):
        longest = rng.choice([rng.uniform(0, 120), rng.uniform(0, 7200), rng.uniform(0, 3 * 86400),
                              rng.uniform(0, 60 * 86400)])
        top, tick = charts.duration_axis(longest)
        labels = [tick(top * i / 4) for i in range(5)]
        assert len(set(labels)) == 5, (longest, labels)
        assert len({label.split()[1] for label in labels}) == 1, labels
        assert top >= longest, (longest, top)
        assert all(float(label.split()[0]) * 4 % 1 == 0 for label in labels), labels   # no 6.25

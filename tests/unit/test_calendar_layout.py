"""The capacity calendar stacks lease bars so that bars overlapping in time never share GPUs."""
from __future__ import annotations

from gpu_tenancy.dashboard.calendar_page import Bar, first_fit


def test_bars_overlapping_in_time_get_disjoint_gpu_ranges_and_later_ones_reuse_freed_room():
    a, b, c, d = Bar({}, 0, 100, 4), Bar({}, 50, 150, 2), Bar({}, 120, 200, 4), Bar({}, 10, 20, 2)
    height = first_fit([a, b, c, d])
    assert (a.offset, d.offset, b.offset) == (0, 4, 4)
    assert c.offset == 0          # a ended before c starts: its room is free again, b sits at 4..6
    assert height == 6
    for x in (a, b, c, d):
        for y in (a, b, c, d):
            if x is not y and x.start < y.end and y.start < x.end:
                assert x.offset + x.gpus <= y.offset or y.offset + y.gpus <= x.offset

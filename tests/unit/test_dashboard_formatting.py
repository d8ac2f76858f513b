"""How the dashboard words times and durations."""
from __future__ import annotations

from gpu_tenancy.dashboard.formatting import relative, span, times_in, when


def test_relative_times_read_as_people_say_them():
    assert relative(0) == relative(59) == relative(-59) == "now"
    assert relative(2 * 3600 + 5 * 60 + 30) == "in 2 h 5 min"
    assert relative(-180) == "3 min ago"
    assert relative(86400 + 3600 + 60) == "in 1 d 1 h"        # minutes are noise beside days


def test_durations_and_times():
    assert span(3600 * 26 + 1800) == "1 d 2 h 30 min"
    assert span(45) == "45 s" and span(None) == ""
    assert when("2026-12-01T14:00:00Z") == '<time datetime="2026-12-01T14:00:00Z">2026-12-01 14:00 UTC</time>'
    assert when(None) == "—"


def test_times_in_a_reason_are_written_for_the_local_time_and_the_rest_is_escaped():
    said = times_in("project <b>x</b> holds 4 of 4 A100 GPUs until 2026-12-02T22:52:10Z (needs 1)")
    assert said == ('project &lt;b&gt;x&lt;/b&gt; holds 4 of 4 A100 GPUs until '
                    '<time datetime="2026-12-02T22:52:10Z">2026-12-02 22:52 UTC</time> (needs 1)')
    assert times_in("no time here") == "no time here" and times_in(None) == ""

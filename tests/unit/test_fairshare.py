import math

import pytest

from gpu_tenancy.domain.fairshare import UsageRecord, decayed_gpu_hours, share_score

NOW = 1_800_000_000
DAY = 86400


def test_no_decay_counts_plain_gpu_hours_and_clips_at_now():
    recs = [("p1", "A100", 2, NOW - 3 * 3600, NOW - 3600),        # 4 GPU-h
            UsageRecord("p1", "A100", 1, NOW - 3600, NOW + 10 * 3600),  # running: 1 GPU-h so far
            ("p2", "A100", 8, NOW + 10, NOW + 20)]                   # future: nothing
    u = decayed_gpu_hours(recs, NOW, 0)
    assert u == {("p1", "A100"): pytest.approx(5.0)}


def test_half_life_halves_old_usage():
    hl = 7 * DAY
    recent = decayed_gpu_hours([("p", "A", 1, NOW - 60, NOW)], NOW, hl)[("p", "A")]
    old = decayed_gpu_hours([("p", "A", 1, NOW - hl - 60, NOW - hl)], NOW, hl)[("p", "A")]
    assert old == pytest.approx(recent / 2, rel=1e-6)
    assert recent == pytest.approx(60 / 3600, rel=1e-3)
    # a long record integrates: one half-life of 1 GPU = hl/ln2 * (1 - 1/2) seconds
    whole = decayed_gpu_hours([("p", "A", 1, NOW - hl, NOW)], NOW, hl)[("p", "A")]
    assert whole == pytest.approx(hl / math.log(2) * 0.5 / 3600)


def test_share_score():
    assert share_score({("p", "A"): 10.0}, "p", "A", 2.0) == 5.0
    assert share_score(None, "p", "A", 1.0) == 0.0

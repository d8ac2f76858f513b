"""The owners' figures on hand-made leases, holds and hosts."""
from __future__ import annotations

from gpu_tenancy.domain import figures as f
from gpu_tenancy.domain.figures import HostNow, LeaseFacts

DAY1 = 1_796_083_200          # 2026-12-01T00:00:00Z
DAY2 = DAY1 + 86400
MIN = 60


def lease(name: str, requested: int, *, start=None, active=None, cancelled=None, outcome=None, status="ended",
          failure=None, created=None) -> LeaseFacts:
    return LeaseFacts(name, "p", "A100", 2, status, created if created is not None else requested, requested,
                      start, active, cancelled, outcome, failure)


def test_percentile_is_the_nearest_rank():
    values = [5, 1, 4, 2, 3, 10, 9, 8, 7, 6]
    assert f.percentile(values, 50) == 5
    assert f.percentile(values, 90) == 9
    assert f.percentile([7], 90) == 7
    assert f.percentile([], 50) is None


def test_wait_by_day_counts_only_leases_given_gpus_by_day_of_requested_start():
    leases = [lease("a", DAY1 + 3600, start=DAY1 + 3600),            # 0 s
              lease("b", DAY1 + 7200, start=DAY1 + 7200 + 10 * MIN),  # 600 s
              lease("c", DAY1 + 9000, start=DAY1 + 9000 + 90 * MIN),  # 5400 s
              lease("d", DAY1 + 9000, start=None, status="queued"),   # never given GPUs: not counted
              lease("e", DAY2 + 60, start=DAY2 + 60 + 30)]
    assert f.wait_by_day(leases) == [
        {"day": "2026-12-01", "leases": 3, "p50_wait_seconds": 600, "p90_wait_seconds": 5400},
        {"day": "2026-12-02", "leases": 1, "p50_wait_seconds": 30, "p90_wait_seconds": 30}]


def test_on_time_share_leaves_out_early_cancellations_and_leases_not_yet_due():
    now = DAY1 + 86000
    leases = [lease("on time", DAY1, active=DAY1 + 9 * MIN),
              lease("late", DAY1, active=DAY1 + 11 * MIN),
              lease("never ran", DAY1, status="failed"),
              lease("cancelled early", DAY1, cancelled=DAY1 + 5 * MIN, status="cancelled"),
              lease("cancelled late", DAY1, cancelled=DAY1 + 20 * MIN, status="cancelled"),
              lease("not due", now - 5 * MIN)]
    assert f.on_time_share(leases, now) == [{"day": "2026-12-01", "leases": 4, "on_time": 1, "share": 0.25}]


def test_first_try_success_counts_the_first_attempt_only():
    leases = [lease("straight", DAY1, outcome="active"),
              lease("retried", DAY1, outcome="scheduled"),      # a host fault, retried elsewhere
              lease("failed", DAY1, outcome="failed"),
              lease("ended while booting", DAY1, outcome="ending"),
              lease("never booted", DAY1, outcome=None)]
    assert f.first_try_success(leases) == [{"day": "2026-12-01", "attempts": 3, "first_try_active": 1,
                                            "share": 0.3333}]


def test_failures_by_class_most_first_and_unknown_when_unclassified():
    leases = [lease("a", DAY1, status="failed", failure="image"), lease("b", DAY1, status="failed", failure="volume"),
              lease("c", DAY1, status="failed", failure="image"), lease("d", DAY1, status="failed"),
              lease("e", DAY1, status="ended", failure="boot_timeout")]   # retried and ended well: no failure
    assert f.failures_by_class(leases) == [{"failure_class": "image", "leases": 2},
                                           {"failure_class": "unknown", "leases": 1},
                                           {"failure_class": "volume", "leases": 1}]


def test_cancel_ratio_by_day_of_creation():
    leases = [lease("a", DAY2, created=DAY1, status="cancelled"), lease("b", DAY1), lease("c", DAY1),
              lease("d", DAY1, status="cancelled"), lease("e", DAY2, status="cancelled")]
    assert f.cancel_ratio(leases) == [{"day": "2026-12-01", "leases": 4, "cancelled": 2, "ratio": 0.5},
                                      {"day": "2026-12-02", "leases": 1, "cancelled": 1, "ratio": 1.0}]


def test_hourly_gpu_use_averages_gpu_seconds_over_each_hour():
    start = DAY1
    holds = [(DAY1, DAY1 + 7200, 4),              # 4 GPUs for both hours
             (DAY1 + 1800, DAY1 + 5400, 8),       # 8 GPUs for the second half of hour 1 and the first of hour 2
             (DAY1 - 3600, DAY1 + 900, 2)]        # started before the window: its last 15 minutes count
    rows = f.hourly_gpu_use(holds, 16, start, DAY1 + 3 * 3600)
    assert [r["hour"] for r in rows] == ["2026-12-01T00:00Z", "2026-12-01T01:00Z", "2026-12-01T02:00Z"]
    assert [r["gpus_in_use"] for r in rows] == [4 + 4 + 0.5, 4 + 4, 0]
    assert [r["utilisation"] for r in rows] == [0.5312, 0.5, 0.0]


def test_hourly_gpu_use_of_the_hour_under_way_counts_only_its_time_so_far():
    """The admin page's window ends now, half an hour into the hour. A lease of 8 GPUs began two
    minutes ago for two hours: the cloud's 8 GPUs were free for 28 of the 30 minutes, so they
    were held on average 8 * 2 / 30 = 0.533 of them. Before: the hour's other 30 minutes, still
    to come and only planned, were counted, and over a whole hour: 8 * 32 / 60 = 4.267 (53 %)."""
    now = DAY1 + 1800
    rows = f.hourly_gpu_use([(now - 2 * MIN, now + 7200, 8)], 8, DAY1, now)
    assert [(r["hour"], r["gpus_in_use"], r["utilisation"]) for r in rows] == [("2026-12-01T00:00Z", 0.533, 0.0667)]


def test_idle_fragmentation_counts_free_gpus_the_common_waiting_shape_cannot_use():
    hosts = [HostNow("a1", "A100", 8, 3, True), HostNow("a2", "A100", 8, 4, True),
             HostNow("a3", "A100", 8, 2, False),           # out of service: its GPUs are not free
             HostNow("a4", "A100", 8, 0, True), HostNow("h1", "H100", 4, 4, True)]
    waiting = [("A100", 4), ("A100", 4), ("A100", 8), ("H100", 1)]
    assert f.idle_fragmentation(hosts, waiting) == [
        {"gpu_model": "A100", "common_waiting_gpus_per_vm": 4, "waiting_leases": 3, "free_gpus": 7,
         "stranded_gpus": 3, "share_stranded": 0.4286},
        {"gpu_model": "H100", "common_waiting_gpus_per_vm": 1, "waiting_leases": 1, "free_gpus": 4,
         "stranded_gpus": 0, "share_stranded": 0.0}]
    assert f.idle_fragmentation(hosts, []) == []

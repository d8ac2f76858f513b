"""ETA honesty on hand-made leases: kept by ETA + 10 min, lateness clipped at 0,
nearest-rank P50/P90; per day of the start for the admin figures; and the
replay's figures (bench/metrics.eta_figures) over the jobs that waited."""
from __future__ import annotations

import os
import sys

import pytest

from gpu_tenancy.domain.eta_honesty import ETA_SLACK, eta_honesty, eta_kept_by_day, kept, lateness
from gpu_tenancy.domain.figures import LeaseFacts

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from gpu_tenancy.whatif.event_loop import Outcome  # noqa: E402
from metrics import eta_figures  # noqa: E402
from traces import Job  # noqa: E402

DAY1 = 1_796_083_200          # 2026-12-01T00:00:00Z
DAY2 = DAY1 + 86400
MIN = 60


def test_kept_is_by_eta_plus_ten_minutes_and_early_is_not_late():
    assert ETA_SLACK == 10 * MIN
    assert kept(1000, 1000) and kept(1000, 1000 + 600) and not kept(1000, 1000 + 601)
    assert kept(1000, 10)                                   # early: kept
    assert lateness(1000, 10) == 0 and lateness(1000, 1600) == 600 and lateness(1000, 4600) == 3600


def test_eta_honesty_counts_kept_and_lateness_percentiles():
    eta = DAY1
    # lateness 0 (early), 0, 5 min, 10 min (still kept), 11 min, 1 h, 2 h, 3 h, 4 h, 5 h
    starts = [eta - 3600, eta, eta + 5 * MIN, eta + 10 * MIN, eta + 11 * MIN] + [eta + h * 3600 for h in (1, 2, 3, 4, 5)]
    h = eta_honesty((eta, s) for s in starts)
    assert h.leases == 10 and h.kept == 4 and h.kept_ratio == pytest.approx(0.4)
    assert h.lateness == (0, 0, 300, 600, 660, 3600, 7200, 10800, 14400, 18000)
    assert h.lateness_percentile(50) == 660                 # nearest rank: the 5th of 10
    assert h.lateness_percentile(90) == 14400               # the 9th of 10
    assert eta_honesty([]).kept_ratio is None and eta_honesty([]).lateness_percentile(90) is None


def facts(name: str, *, first_eta=None, start=None, start_by=None) -> LeaseFacts:
    return LeaseFacts(name, "p", "A100", 8, "active", DAY1, DAY1, start, start, None, None, None, first_eta, start_by)


def test_eta_kept_by_day_counts_leases_that_waited_and_started_by_day_of_the_start():
    now = DAY2 + 3600
    leases = [facts("kept", first_eta=DAY1 + 3600, start=DAY1 + 3600 + 5 * MIN, start_by=DAY1 + 3600),
              facts("late", first_eta=DAY1 + 3600, start=DAY1 + 3 * 3600, start_by=DAY1 + 2 * 3600 + 50 * MIN),
              facts("next day", first_eta=DAY1 + 20 * 3600, start=DAY2 + 60),
              facts("never waited", start=DAY1 + 60),                          # no first ETA
              facts("still waiting", first_eta=DAY2 + 7200, start=DAY2 + 7200),  # its start is to come
              facts("not started", first_eta=DAY1 + 3600)]
    assert eta_kept_by_day(leases, now) == [
        {"day": "2026-12-01", "leases": 2, "kept": 1, "share": 0.5,
         "p50_lateness_seconds": 300, "p90_lateness_seconds": 7200, "start_by_share": 1.0},   # 10 min slack
        {"day": "2026-12-02", "leases": 1, "kept": 0, "share": 0.0,
         "p50_lateness_seconds": 4 * 3600 + 60, "p90_lateness_seconds": 4 * 3600 + 60,
         "start_by_share": None}]   # told no start-by


def test_replay_eta_figures_are_over_the_jobs_that_waited():
    jobs = [Job("a", "t", 0, 100, 1, 1), Job("b", "t", 0, 100, 1, 1), Job("c", "t", 10, 100, 1, 1),
            Job("d", "t", 20, 100, 1, 1)]
    out = Outcome("x", {"a": 0, "b": 100, "c": 2000, "d": 30}, {}, None)   # a started at once
    out.first_eta = {"a": 0, "b": 100, "c": 1000}                          # d waited, told nothing
    r = eta_figures(out, jobs)
    assert (r["n_waited"], r["n_eta"]) == (3, 2)
    assert r["eta_kept"] == 0.5 and r["late_p50"] == 0 and r["late_p90"] == 1000
    out.first_eta = None                                                   # a scheduler that gives no ETA
    r = eta_figures(out, jobs)
    assert r["n_waited"] == 3 and r["n_eta"] is None and r["eta_kept"] is None

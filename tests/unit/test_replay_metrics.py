"""The replay's figures (bench/metrics.py, report.py, planner_scale's growth
rate, cluster_model's offered load) on hand-made data with hand-computed
answers."""
from __future__ import annotations

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from gpu_tenancy.whatif.cluster_model import Cluster, demand, offered_load  # noqa: E402
from gpu_tenancy.whatif.event_loop import Outcome  # noqa: E402
from metrics import hourly, jain, load_classes_at, p90_tail, start_by_figures, summarize  # noqa: E402
from gpu_tenancy.domain.start_by import StartBy  # noqa: E402
from planner_scale import growth_exponent  # noqa: E402
from report import hms, ratio, table  # noqa: E402
from traces import Job  # noqa: E402

H = 3600


def test_jain_index():
    assert jain([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)        # one of four gets everything: 1/n
    assert jain([1, 2]) == pytest.approx(9 / 10)             # (1+2)^2 / (2 x (1+4))
    assert jain([]) == 1.0 and jain([0, 0]) == 1.0           # nobody wanted anything: nothing unfair


def test_hourly_means_of_boxes():
    # 2 GPUs for the first half hour, then 4 GPUs from 1.5 h to 3 h
    hours, level = hourly([(0, 1800, 2), (int(1.5 * H), 3 * H, 4)], 0, 3 * H)
    assert list(hours) == [0, H, 2 * H]                     # the hours starting in [0, 3 h)
    assert list(level) == pytest.approx([1.0, 2.0, 4.0])


def test_offered_load_clips_work_at_the_window_end():
    # a 10 h job of 8 GPUs arriving at 0 in a 2 h window asks 16 GPU-h of it, not 80
    jobs = [Job("a", "t", 0, 10 * H, 8, 1), Job("b", "t", H, 1800, 2, 1)]
    assert demand(jobs, (0, 2 * H)) == pytest.approx(8 * 2 * H + 2 * 1800)
    assert offered_load(jobs, 16, (0, 2 * H)) == pytest.approx((16 + 1) / 32)


def test_growth_exponent():
    assert growth_exponent([1000, 2000, 4000], [1.0, 2.0, 4.0]) == pytest.approx(1.0)
    assert growth_exponent([1000, 10000], [0.1, 10.0]) == pytest.approx(2.0)


def outcome(jobs, starts, n_hosts=1, frag=0.0):
    out = Outcome("hand", dict(starts), {j.jid: [0] for j in jobs}, Cluster(n_hosts))
    out.frag_gpu_seconds = frag
    out.span = (jobs[0].arrival, max(starts[j.jid] + j.runtime for j in jobs))
    out.wall_seconds = 2.0
    out.extra = {"plans": 10, "plan_seconds": 0.5}
    return out


def test_summarize_waits_use_fairness_and_replans():
    # one host of 8: tenant a runs 8 GPUs for 2 h at once; b's 4-GPU hour waits 2 h for it
    jobs = [Job("a1", "a", 0, 2 * H, 8, 1), Job("b1", "b", 0, H, 4, 1)]
    out = outcome(jobs, {"a1": 0, "b1": 2 * H}, frag=0.0)
    r = summarize(out, jobs, {"a": 0.5, "b": 0.5}, 8)
    assert r["p50"] == pytest.approx(H)            # waits 0 and 2 h: the median interpolates
    assert r["mean"] == pytest.approx(H)
    assert r["big_p90"] == 0 and r["n_big"] == 1   # the 8-GPU lease did not wait
    assert r["makespan_h"] == pytest.approx(3.0)
    # slowdowns: a 1, b (2 h + 1 h) / 1 h = 3 -> Jain (1+3)^2 / (2 x 10) = 0.8
    assert r["jain_slowdown"] == pytest.approx(0.8)
    # the submission window is the first second only: a got 8 of its entitlement min(4, 8) (capped 1),
    # b none of min(4, 4): Jain of (1, 0) = 0.5
    assert r["jain_quota"] == pytest.approx(0.5)
    assert r["replans_per_s"] == pytest.approx(5.0) and r["ms_per_plan"] == pytest.approx(50.0)


def test_big_leases_within_share_leave_out_the_tenants_over_theirs():
    # a asks 3/4 of the GPU-hours on a half share: over it; b a quarter on a half: within
    jobs = [Job("a1", "a", 0, 2 * H, 8, 1), Job("a2", "a", 0, H, 8, 1), Job("b1", "b", 0, H, 8, 1)]
    out = outcome(jobs, {"a1": 0, "a2": 5 * H, "b1": 2 * H})
    r = summarize(out, jobs, {"a": 0.5, "b": 0.5}, 8)
    assert r["over_share"] == ["a"] and r["n_big_within"] == 1
    assert r["big_p90_within"] == pytest.approx(2 * H)   # b's wait only (a's 5 h left out)
    assert r["big_p90"] > r["big_p90_within"]


def test_the_p90_tail_names_the_tenants_whose_leases_wait_longest():
    # twenty leases waiting 0..19 h in no particular order: the P90 is 17.1 h, so the tail is the
    # 18 h and 19 h leases (the P80 would take four, the P99 one), c's 8-GPU one and b's 1-GPU
    # one: one each, named in order; the leases last in the list are x's, whatever their waits
    hours = [5, 9, 0, 18, 7, 12, 3, 16, 1, 10, 14, 19, 2, 8, 11, 4, 17, 6, 13, 15]
    tenant = {3: ("c", 8), 11: ("b", 1), 16: ("a", 1), 7: ("a", 1)}
    jobs = [Job(f"j{i}", tenant.get(i, ("x", 1))[0], 0, H, tenant.get(i, ("x", 1))[1], 1) for i in range(20)]
    waits = [h * H for h in hours]
    assert p90_tail(jobs, waits) == [("b", 1, 0), ("c", 1, 1)]
    # b's and c's waits cut to 0 h and 1 h, two of x's raised to 18 h and 19 h: the tail is x's alone
    hours2 = [18, 19, 0, 0, 7, 12, 3, 16, 1, 10, 14, 1, 2, 8, 11, 4, 17, 6, 13, 15]
    assert p90_tail(jobs, [h * H for h in hours2], top=1) == [("x", 2, 0)]
    assert p90_tail(jobs[:1], [0]) == [("x", 1, 0)]   # one lease: it is at the P90
    assert p90_tail([], []) == []
    out = outcome(jobs, {j.jid: w for j, w in zip(jobs, waits)})
    assert summarize(out, jobs, {"a": 0.2, "b": 0.2, "c": 0.2, "x": 0.4}, 8)["p90_tail"] == [("b", 1, 0), ("c", 1, 1)]


def test_start_by_figures_tell_each_lease_from_what_had_happened_by_then():
    # a waits, told 1 h, starts 1 h late (ratio 1; nothing known when it was told: start-by = ETA,
    # missed); b, told 4 h at 3 h, after a started, is told 4 h + 1 h and starts at 4.5 h (kept);
    # c starts as told, at once: not among the leases that waited
    jobs = [Job("a", "t", 0, H, 1, 1), Job("b", "t", 3 * H, H, 1, 1), Job("c", "u", H // 2, H, 1, 1)]
    out = outcome(jobs, {"a": 2 * H, "b": 4 * H + H // 2, "c": H // 2})
    out.first_eta = {"a": H, "b": 4 * H, "c": H // 2}
    r = start_by_figures(out, jobs, StartBy(min_own=1))
    assert r["start_by_kept"] == pytest.approx(0.5)
    assert r["start_by_margin_p50"] == pytest.approx(H / 2)   # margins 0 and 1 h
    assert r["start_by_early_p50"] == pytest.approx(H / 4)    # a none, b half an hour before it
    # a starts after b: when b was told, a was waiting 2 h past its 1 h ETA (ratio 2 so far)
    out.start["a"] = 4 * H + H // 2 + 1
    r = start_by_figures(out, jobs, StartBy(min_own=1))
    assert r["start_by_margin_p50"] == pytest.approx(H)       # margins 0 and 2 h
    assert r["start_by_kept"] == pytest.approx(0.5)
    summary = summarize(out, jobs, {"t": 0.5, "u": 0.5}, 8)   # saved with the run, aligned with the jobs
    assert summary["told"] == [H, 4 * H, H // 2] and summary["start_by_kept"] == pytest.approx(0.5)
    out.first_eta = {"c": H // 2}   # told, but no lease waited: nothing to score
    assert start_by_figures(out, jobs)["start_by_kept"] is None
    out.first_eta = None   # a scheduler that tells no ETA
    assert start_by_figures(out, jobs)["start_by_kept"] is None
    assert summarize(out, jobs, {"t": 0.5, "u": 0.5}, 8)["told"] is None


def test_a_tenants_load_class_is_what_its_jobs_held_just_before():
    # shares of a 16-GPU cluster: t's fair part is 8 (a quarter: 2). t's 8-GPU job holds
    # [H, 3 H): class 3 (8 = 4 quarters) from just after its start to its end, counted before
    # each instant (so a start's own sample counts what was held before it); u holds nothing
    jobs = [Job("a", "t", 0, 2 * H, 8, 1), Job("b", "u", 0, H, 1, 1)]
    out = outcome(jobs, {"a": H, "b": 10 * H})
    out.start["b"] = 10 * H
    load_at = load_classes_at(out, jobs, {"t": 0.5, "u": 0.5}, 16)
    assert [load_at("t", t) for t in (0, H, H + 1, 3 * H, 3 * H + 1)] == [0, 0, 3, 3, 0]
    assert load_at("u", 5 * H) == 0 and load_at("nobody", H) == 0


def test_start_by_figures_know_the_starts_of_the_second_they_tell_in():
    # x: told 1 h, starts 2 h late (ratio 2); a: told at 2 h while x is 1 h past its ETA (ratio 1
    # so far): a 2 h wait gets 2 h more; a starts on time at 4 h, the second b is told: with a's
    # 0 known, the median of (0, 2) is 0 and b is told its ETA (told first, b would get 2 h more)
    jobs = [Job("x", "t", 0, H, 1, 1), Job("a", "t", 2 * H, H, 1, 1), Job("b", "t", 4 * H, H, 1, 1)]
    out = outcome(jobs, {"x": 3 * H, "a": 4 * H, "b": 5 * H})
    out.first_eta = {"x": H, "a": 4 * H, "b": 5 * H}
    r = start_by_figures(out, jobs, StartBy(q=0.5, min_own=1))
    assert r["start_by_margin_p50"] == 0 and r["start_by_margin_p90"] == pytest.approx(1.6 * H)   # 0, 0, 2 h
    assert r["start_by_kept"] == pytest.approx(2 / 3)


def test_start_by_figures_allow_ten_minutes():
    jobs = [Job("y", "u", 0, H, 1, 1)]
    out = outcome(jobs, {"y": H + 600})          # told 1 h with no margin known, started 10 min after
    out.first_eta = {"y": H}
    assert start_by_figures(out, jobs)["start_by_kept"] == 1.0
    out.start["y"] = H + 601
    assert start_by_figures(out, jobs)["start_by_kept"] == 0.0


def test_table_ratios_against_easy():
    base = {"p50": 60.0, "p90": 600.0, "p99": 6000.0, "mean": 100.0, "big_p50": 0.0, "big_p90": 1200.0,
            "use": 0.8, "frag": 0.01, "jain_slowdown": 0.9, "jain_quota": 0.95}
    results = {"gpu-tenancy": {**base, "p90": 300.0, "big_p90_within": 600.0}, "EASY": {**base, "big_p90_within": 1200.0},
               "lower bound (mean)": {"bound_only": True, "mean": 25.0}}
    md = table(results)
    row = next(line for line in md.splitlines() if line.startswith("| gpu-tenancy "))
    assert "| 1.00, 0.50, 1.00 |" in row                       # P50, P90, >=8 P90 / EASY
    assert row.endswith("| 10.0m (0.50) |")                   # >=8 P90 of the tenants within share, / EASY
    bound = next(line for line in md.splitlines() if line.startswith("| lower bound"))
    assert "≥ 25s" in bound and "mean 0.25" in bound
    assert ratio(0, 0) == "-" and ratio(1, 0) == "inf"
    assert hms(59) == "59s" and hms(90) == "1.5m" and hms(5400) == "1.5h"


def test_smooth_keeps_a_flat_series_flat_to_its_ends():
    import numpy as np
    from report import smooth
    assert list(smooth(np.full(50, 0.8), 24)) == pytest.approx([0.8] * 50)
    assert list(smooth(np.array([0.0, 1.0, 0.0, 0.0]), 3)) == pytest.approx([0.5, 1 / 3, 1 / 3, 0.0])

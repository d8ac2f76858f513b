"""The trace replay's baselines, lower bound, cluster model and sizing
(bench/): hand-made traces with hand-computed waits."""
from __future__ import annotations

import os
import random
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from baselines import EASY, FIFO, RefuseRetry  # noqa: E402
from gpu_tenancy.whatif.cluster_model import hosts_for_load, offered_load  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from lower_bound import mean_wait_bound  # noqa: E402
from gpu_tenancy.whatif.planner_sched import GpuTenancy, quota_limits  # noqa: E402
from traces import Job, shape  # noqa: E402


def job(i, arrival, runtime, gpus, tenant="a"):
    g, n = shape(gpus)
    return Job(f"j{i}", tenant, arrival, runtime, g, n)


def waits(out, jobs):
    return {j.jid: out.start[j.jid] - j.arrival for j in jobs}


# one host of 8 GPUs: A holds 6 GPUs until 100; B (4 GPUs) waits for it;
# C (2 GPUs, 50 s) fits in the 2 free GPUs and ends before B's reservation
BACKFILL = [job(0, 0, 100, 6), job(1, 1, 100, 4), job(2, 2, 50, 2)]


def test_fifo_holds_back_what_easy_backfills():
    f = waits(simulate(BACKFILL, 1, FIFO()), BACKFILL)
    e = waits(simulate(BACKFILL, 1, EASY()), BACKFILL)
    assert f == {"j0": 0, "j1": 99, "j2": 98}     # C waits behind B until A ends at 100
    assert e == {"j0": 0, "j1": 99, "j2": 0}      # C starts at once, ends at 52 < 100


def test_easy_does_not_backfill_a_job_that_delays_the_head():
    # B needs the whole host at 100; C (2 GPUs, 500 s) would still hold 2 then and
    # delay B to 502, so EASY keeps C waiting although it fits now
    jobs = [job(0, 0, 100, 6), job(1, 1, 100, 8), job(2, 2, 500, 2)]
    e = waits(simulate(jobs, 1, EASY()), jobs)
    assert e == {"j0": 0, "j1": 99, "j2": 198}    # C starts when B ends at 200


def test_easy_backfills_a_long_job_that_leaves_room_for_the_head():
    jobs = [job(0, 0, 100, 6), job(1, 1, 100, 4), job(2, 2, 500, 2)]
    e = waits(simulate(jobs, 1, EASY()), jobs)
    assert e == {"j0": 0, "j1": 99, "j2": 0}      # at 100: 8 - 2 = 6 free >= 4


def test_refuse_retry_waits_a_multiple_of_the_interval():
    jobs = [job(0, 0, 1000, 8), job(1, 10, 50, 4), job(2, 20, 50, 1)]
    out = simulate(jobs, 1, RefuseRetry(retry=300))
    w = waits(out, jobs)
    # refused at 10 and 20; retries at 310, 610, 910 refused; 1210 / 1220 fit
    assert w == {"j0": 0, "j1": 1200, "j2": 1200}
    assert all(v % 300 == 0 for v in w.values())
    assert out.extra["requests"] == 3 + 2 * 4


def test_gangs_need_whole_hosts():
    # 2 hosts; a 1-GPU job on host 0 keeps a 16-GPU gang (2 x 8) waiting until it ends
    jobs = [job(0, 0, 100, 1), job(1, 5, 10, 16)]
    for sched in (FIFO(), EASY(), GpuTenancy(quota_limits({"a": 1.0}, 16, "open"))):
        w = waits(simulate(jobs, 2, sched), jobs)
        assert w == {"j0": 0, "j1": 95}, sched.name


def random_trace(rng, n=40, hosts=3):
    jobs, t = [], 0
    for i in range(n):
        t += rng.randint(0, 120)
        gpus = rng.choice([1, 1, 1, 2, 4, 8, 16])
        jobs.append(job(i, t, rng.randint(10, 900), gpus, rng.choice("abc")))
    return jobs


def per_host_peak(cluster):
    """Most GPUs ever taken on a host, replaying the log (releases before takes at an instant)."""
    used = [0] * len(cluster.free)
    peak = 0
    for _t, h, d in sorted(cluster.log, key=lambda e: (e[0], e[2] > 0)):
        used[h] += d
        assert used[h] >= 0
        peak = max(peak, used[h])
    return peak


@pytest.mark.parametrize("seed", range(6))
def test_lower_bound_and_no_overcommit_on_random_traces(seed):
    rng = random.Random(seed)
    jobs = random_trace(rng)
    n_hosts = 3
    bound = mean_wait_bound(jobs, n_hosts * 8)
    shares = {"a": 0.5, "b": 0.3, "c": 0.2}
    scheds = [FIFO(), EASY(), RefuseRetry(60), GpuTenancy(quota_limits(shares, 24, "open")),
              GpuTenancy(quota_limits(shares, 24, "quota"), name="q")]
    means = {}
    for s in scheds:
        out = simulate(jobs, n_hosts, s)
        w = waits(out, jobs)
        assert min(w.values()) >= 0
        means[s.name] = sum(w.values()) / len(w)
        assert per_host_peak(out.cluster) <= 8, s.name
        assert all(f == 8 for f in out.cluster.free)       # everything released at the end
    assert all(bound <= m + 1e-6 for m in means.values()), (bound, means)
    # EASY never does worse than FIFO on the head-of-line: its mean is at most FIFO's here
    assert means["EASY"] <= means["FIFO"] + 1e-6


def test_lower_bound_is_tight_for_a_serial_overload():
    # 3 jobs of 8 GPUs x 100 s at t=0 on one host: best mean wait is (0+100+200)/3
    jobs = [job(i, 0, 100, 8) for i in range(3)]
    assert mean_wait_bound(jobs, 8) == pytest.approx(100.0)
    out = simulate(jobs, 1, EASY())
    assert sum(waits(out, jobs).values()) / 3 == pytest.approx(100.0)


def test_offered_load_sizing():
    # 10 jobs of 4 GPUs x 3600 s over a 10 h window: 40 GPU-h / 10 h = 4 GPUs busy
    jobs = [job(i, i * 3600, 3600, 4) for i in range(10)]
    win = (0, 36000)
    assert offered_load(jobs, 8, win) == pytest.approx(0.5)
    assert hosts_for_load(jobs, 0.5, win) == 1
    big = [job(i, i * 3600, 3600, 40) for i in range(10)]       # 40 GPUs busy on average
    assert hosts_for_load(big, 0.8, win) == 6                    # 40 / (0.8 x 8) = 6.25 -> 6
    assert offered_load(big, 6 * 8, win) == pytest.approx(40 / 48)
    assert hosts_for_load([job(0, 0, 1, 64)], 0.01, (0, 10 ** 9)) == 8   # the biggest gang must fit


def test_shape_makes_gangs_of_whole_hosts():
    assert shape(1) == (1, 1) and shape(8) == (8, 1)
    assert shape(16) == (8, 2) and shape(12) == (8, 2) and shape(128) == (8, 16)


def test_lower_bound_counts_jobs_that_must_still_be_running():
    # 16 one-GPU jobs of 1000 s at t=0 on 8 GPUs: the best mean wait is 500 s
    # (8 wait 1000 s). SRPT alone bounds it by 62.5 s; with "every job is in the
    # system for its run time" the sweep gives (16 x 1000 + 125 x 36 - 16 x 1000) / 16
    jobs = [job(i, 0, 1000, 1) for i in range(16)]
    assert mean_wait_bound(jobs, 8) == pytest.approx(125 * 36 / 16)
    out = simulate(jobs, 1, EASY())
    assert sum(waits(out, jobs).values()) / 16 == pytest.approx(500.0)


@pytest.mark.parametrize("seed", range(6))
def test_telling_etas_changes_no_start_and_every_waiting_job_gets_one(seed):
    """Planning on a full cluster only to tell arriving leases their ETA starts nothing:
    the same starts as without; every job that waited was told an ETA, none in the past."""
    rng = random.Random(seed)
    jobs = random_trace(rng, n=60, hosts=2)
    shares = {"a": 0.5, "b": 0.3, "c": 0.2}
    told = simulate(jobs, 2, GpuTenancy(quota_limits(shares, 16, "open")))
    silent = GpuTenancy(quota_limits(shares, 16, "open"))
    silent.first_eta = None
    assert simulate(jobs, 2, silent).start == told.start
    waited = [j for j in jobs if told.start[j.jid] > j.arrival]
    assert waited and all(told.first_eta[j.jid] >= j.arrival for j in waited)


@pytest.mark.parametrize("seed", range(4))
def test_the_promise_prototypes_overcommit_nothing_and_start_every_job(seed):
    rng = random.Random(seed)
    jobs = random_trace(rng, n=60, hosts=2)
    shares = {"a": 0.5, "b": 0.3, "c": 0.2}
    for promise in ("fairshare", "eta"):
        out = simulate(jobs, 2, GpuTenancy(quota_limits(shares, 16, "open"), promise=promise))   # all start
        assert per_host_peak(out.cluster) <= 8 and all(f == 8 for f in out.cluster.free)
        assert all(out.start[j.jid] >= j.arrival for j in jobs)

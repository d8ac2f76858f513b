"""Age x size (PlannerSettings.age_size_gpu_hours, domain/age_size.py): a heavy tenant's big
lease, which fair share alone keeps behind a stream of lighter tenants' small leases, starts
within hours; the order otherwise stays fair share's."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.age_size import aged_score
from gpu_tenancy.domain.model import Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings, order_key, plan
from gpu_tenancy.whatif.event_loop import simulate
from gpu_tenancy.whatif.history import Lease
from gpu_tenancy.whatif.planner_sched import GpuTenancy, quota_limits

H = 3600
LIGHT = [f"light{i}" for i in range(8)]
SHARES = {"heavy": 1 / 9, **{t: 1 / 9 for t in LIGHT}}
BIG_AT = 12 * H


def world(seed: int) -> list[Lease]:
    """Two 8-GPU hosts. The heavy tenant fills both for 10 h, then, at 12 h, asks for one whole
    host; meanwhile eight light tenants keep asking for 1 GPU for 1-3 h, more than the cluster
    runs, for four days: each of them stays below the heavy tenant's use for days."""
    rng = random.Random(seed)
    jobs = [Lease(f"h{i}", "heavy", 0, 10 * H, 8, 1, seq=i) for i in range(2)]
    jobs.append(Lease("big", "heavy", BIG_AT, 2 * H, 8, 1, seq=2))
    t, i = 60, 3
    while t < 4 * 24 * H:
        jobs.append(Lease(f"s{i}", rng.choice(LIGHT), t, rng.randrange(H, 3 * H), 1, 1, seq=i))
        t += rng.randrange(300, 600)
        i += 1
    return sorted(jobs, key=lambda j: (j.arrival, j.seq))


def big_wait(seed: int, settings: PlannerSettings) -> int:
    jobs = world(seed)
    out = simulate(jobs, 2, GpuTenancy(quota_limits(SHARES, 16, "open"), settings=settings))
    return out.start["big"] - BIG_AT


@pytest.mark.parametrize("seed", range(2))
def test_a_big_lease_behind_a_stream_of_small_ones_starts_within_hours(seed):
    starved = big_wait(seed, PlannerSettings())
    aged = big_wait(seed, PlannerSettings(age_size_gpu_hours=8))
    assert starved > 48 * H, starved       # fair share alone: days, while the light tenants stream
    assert aged <= 8 * H, aged             # halved every hour it waits: first within a few hours


def _lr(lid: str, project: str, gpus: int, created: int) -> LeaseRequest:
    return LeaseRequest(lid, project, "A100", gpus, 1, 3600, created, None, created)


def test_score_halves_per_gpu_hours_waited_and_is_fair_share_when_off():
    lr = _lr("x", "p", 8, 1000)
    assert aged_score(10.0, lr, 1000 + 2 * H, None) == 10.0
    assert aged_score(10.0, lr, 1000 + 2 * H, 16) == pytest.approx(5.0)     # 8 GPUs x 2 h = 16 GPU-hours
    assert aged_score(10.0, _lr("y", "p", 1, 1000), 1000 + 2 * H, 16) == pytest.approx(10.0 * 2 ** (-2 / 16))
    assert aged_score(0.0, lr, 10**6, 16) == 0.0


def test_in_the_order_a_big_lease_that_waited_goes_before_a_lighter_tenants_new_one():
    now = 10 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in ("heavy", "light")}
    usage = {("heavy", "A100"): 100.0, ("light", "A100"): 10.0}
    big, small = _lr("big", "heavy", 8, 0), _lr("small", "light", 1, now)
    hosts = [Host("h1", "A100", 8)]
    for settings, first in ((PlannerSettings(), "small"), (PlannerSettings(age_size_gpu_hours=16), "big")):
        keys = sorted((order_key(lr, quotas, usage, now, settings), lr.lease_id) for lr in (big, small))
        assert keys[0][1] == first
        p = plan(now, hosts, [], quotas, [big, small], usage, settings)
        assert next(iter(p.leases)) == first   # plan() orders them alike


def test_the_reasons_say_that_waiting_counts():
    now = 10 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in ("heavy", "light")}
    usage = {("heavy", "A100"): 100.0, ("light", "A100"): 10.0}
    waiting = [_lr("big", "heavy", 8, 0), _lr("small", "light", 8, now)]
    p = plan(now, [Host("h1", "A100", 8)], [], quotas, waiting, usage, PlannerSettings(age_size_gpu_hours=16))
    assert [r.message for r in p.leases["small"].reasons if r.code == "fairshare"] == [
        "project light has used 10 A100 GPU-hours recently against weight 1; 1 lease of projects that used "
        "less (or that waited more GPU-hours: age x size) go first"]


def test_the_reasons_count_a_projects_own_lease_that_waited_more_as_its_own():
    """p's older lease a ages ahead of p's b: it goes first as p's own lease, not as one of a
    project that used less (with age x size off, both have p's score: "submitted earlier")."""
    now = 10 * H
    quotas = {("p", "A100"): QuotaLimit("p", "A100", 16)}
    usage = {("p", "A100"): 10.0}
    waiting = [_lr("a", "p", 1, now - 4 * H), _lr("b", "p", 1, now - H)]
    hosts = [Host("h1", "A100", 1)]
    for settings, words in ((PlannerSettings(), "behind 1 lease submitted earlier"),
                            (PlannerSettings(age_size_gpu_hours=16),
                             "behind 1 lease of its own project that goes first: waited more GPU-hours (age x size)")):
        p = plan(now, hosts, [], quotas, waiting, usage, settings)
        assert list(p.leases) == ["a", "b"]
        assert [r.message for r in p.leases["b"].reasons if r.code in ("fairshare", "order")] == [words]

"""Queue reasons that agree with themselves (issue 19, trap 5): the figures a reason gives are
the ones that hold the lease back. Hand-checked cases, then a seeded promise over random plans."""
from __future__ import annotations

import re

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import fmt_time, plan
from tests.unit.test_planner_oracle import NOW, case, wide_case

H = 3600
M = "H100"
QUOTA = re.compile(r"project \S+ holds (\d+) of (\d+) \S+ GPUs until (\S+) \(this lease needs (\d+)\)")


def test_the_held_count_is_taken_where_the_quota_blocks_not_at_the_asked_start():
    """ml-vision may hold 4 H100. Its first lease (4 GPUs, 2 h) waits an hour for GPUs another
    project holds and is planned 09:00-11:00; its second (1 GPU, 1 h) finds the quota free now but
    no GPU until 09:00, and at 09:00 the first lease holds all 4 until 11:00. The reason said
    "holds 0 of 4" (counted over 08:00-09:00, where nothing of it is held)."""
    hosts = [Host("h1", M, 4), Host("h2", M, 4)]
    holds = [Hold("busy1", "other", "h1", M, 4, NOW - H, NOW + H), Hold("busy2", "other", "h2", M, 4, NOW - H, NOW + H)]
    quotas = {("ml-vision", M): QuotaLimit("ml-vision", M, 4), ("other", M): QuotaLimit("other", M, 8)}
    first = LeaseRequest("first", "ml-vision", M, 4, 1, 2 * H, NOW, None, NOW - 200)
    second = LeaseRequest("second", "ml-vision", M, 1, 1, H, NOW, None, NOW - 100)
    p = plan(NOW, hosts, holds, quotas, [first, second])
    assert p.leases["first"].placement.start == NOW + H
    assert p.leases["second"].placement.start == NOW + 3 * H
    said = [r.message for r in p.leases["second"].reasons if r.code == "quota"]
    assert said == [f"project ml-vision holds 4 of 4 H100 GPUs until {fmt_time(NOW + 3 * H)} (this lease needs 1)"]


@pytest.mark.parametrize("make, seeds", [(case, range(0, 300)), (wide_case, range(10_000, 10_160))])
def test_a_quota_reason_never_says_the_lease_would_fit(make, seeds):
    """The promise on seeded random plans: where a reason says the quota holds a lease back
    until T, what it says is held plus what the lease needs is more than the quota, and T is
    no later than the lease's planned start."""
    checked = 0
    for seed in seeds:
        hosts, holds, quotas, waiting, usage = make(seed)
        p = plan(NOW, hosts, holds, quotas, waiting, usage)
        for lid, pl in p.leases.items():
            for r in pl.reasons:
                found = QUOTA.fullmatch(r.message)
                if r.code != "quota" or found is None:
                    continue
                held, quota, until, need = found.groups()
                assert int(held) + int(need) > int(quota), (seed, lid, r.message)
                assert pl.placement is None or until <= fmt_time(pl.placement.start), (seed, lid, r.message)
                checked += 1
    assert checked > 5   # the cases do reach the quota reason

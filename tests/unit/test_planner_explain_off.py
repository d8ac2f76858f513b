"""plan(explain=False), which also leaves out the quotas that can never bind, places every
lease exactly where plan() does (start, end, hosts, position, borrowing), on seeded random
cases: the oracle's small ones, and the same with quotas at the cluster's size or just
below it (where a quota binds only with holds outside the index or over-committed)."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpu_tenancy.domain.model import Hold
from gpu_tenancy.domain.planner import plan

from test_planner_oracle import NOW, case


def placements(p):
    return {lid: (pl.position, pl.placement, pl.borrowing) for lid, pl in p.leases.items()}


@pytest.mark.parametrize("chunk", range(4))
def test_explain_off_places_like_plan(chunk):
    unbinding = 0
    for seed in range(chunk * 100, chunk * 100 + 100):
        hosts, holds, quotas, waiting, usage = case(seed)
        rng = random.Random(seed)
        size = {m: sum(h.gpus for h in hosts if h.enabled and h.gpu_model == m) for m in ("A100", "V100")}
        if seed % 3:   # quotas around the cluster's size, some with nothing to borrow
            quotas = {k: replace(q, gpus=max(1, size[k[1]] + rng.choice([-2, -1, 0, 0, 4])),
                                 borrow_gpus=rng.choice([0, 0, 0, 4]))
                      for k, q in quotas.items()}
        if seed % 5 == 0 and hosts:   # a hold on a host that is not there, one over-committing a host
            h = hosts[0]
            holds = holds + [Hold("gone", "p1", "no-such-host", h.gpu_model, 4, NOW - 600, NOW + 7200),
                             Hold("over", "p2", h.name, h.gpu_model, h.gpus, NOW - 600, NOW + 5400)]
        full = plan(NOW, hosts, holds, quotas, waiting, usage)
        fast = plan(NOW, hosts, holds, quotas, waiting, usage, explain=False)
        assert placements(fast) == placements(full), seed
        assert list(fast.leases) == list(full.leases)
        unbinding += any(q.borrow_gpus == 0 and q.gpus >= size[k[1]] for k, q in quotas.items())
    assert unbinding > 30   # the cases do exercise quotas left out

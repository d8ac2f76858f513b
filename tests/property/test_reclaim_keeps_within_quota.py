"""A borrower back within its quota is kept; a reclaim frees GPUs only for a lease within its own.

Seeded worlds of lending quotas and running leases, started in order (each marked borrowing as
the ledger marks it: its project held more than its nominal quota once it started; its hold
lasting the cloud's release time past its end, or not), then a few
engine passes of domain/reclaim.py, more leases asked between them: each pass's early ends applied as the engine applies them
(the hold cut at the notice deadline and the release after it, the lease no longer takeable), the clock moved on by less
than a notice, the waiting leases planned again. For every lease a pass reclaims:

- its project, just before the instant it ends, holds more than its nominal quota (it included)
  without every other lease of the project ended early before that instant (under an earlier
  notice) or decided before it in this pass: once those have brought the project back within its quota, it borrows
  nothing any more;
- the lease it is ended for is not borrowing, and its project with it stays within its nominal
  quota for its whole run from the deadline."""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings, plan
from gpu_tenancy.domain.reclaim import ReclaimSettings, early_ends

NOW = 1_800_000_000
M = "A100"
PROJECTS = ("p1", "p2", "p3")
PASSES = 4


def world(seed: int):
    """Up to 3 hosts of 8, quotas that lend; leases started in the last hours, each marked
    borrowing when its start took its project past its nominal quota; up to 6 leases asked now."""
    r = random.Random(seed)
    allowance = r.choice((0, 0, 300))   # the cloud's release time: a hold ends that much after its lease
    hosts = [Host(f"h{i}", M, 8) for i in range(r.randint(1, 3))]
    quotas = {(p, M): QuotaLimit(p, M, r.choice((2, 4, 8)), borrow_gpus=r.choice((2, 4, 8))) for p in PROJECTS}
    free = {h.name: h.gpus for h in hosts}
    held: dict[str, int] = defaultdict(int)
    holds = []
    starts = sorted(NOW - r.choice((600, 3600, 7200, 10800)) for _ in range(r.randint(1, 8)))
    for k, start in enumerate(starts):
        p, gpus = r.choice(PROJECTS), r.choice((1, 2, 2, 4))
        room = [h for h, n in free.items() if n >= gpus]
        if not room or held[p] + gpus > quotas[(p, M)].gpus + quotas[(p, M)].borrow_gpus:
            continue
        host = r.choice(room)
        free[host] -= gpus
        held[p] += gpus
        holds.append(Hold(f"x{k}", p, host, M, gpus, start, NOW + r.choice((1800, 7200, 14400, 28800)) + allowance,
                          borrowing=held[p] > quotas[(p, M)].gpus, allowance=allowance, asked=(start, k)))
    waiting = [asked(r, i, NOW) for i in range(r.randint(1, 6))]
    settings = ReclaimSettings(reclaim_after=r.choice((0, 600)), notice=r.choice((300, 900)),
                               min_runtime=r.choice((0, 1800)))
    return r, hosts, holds, quotas, waiting, settings, PlannerSettings(release_allowance=allowance)


def asked(r: random.Random, i: int, now: int) -> LeaseRequest:
    return LeaseRequest(f"l{i}", r.choice(PROJECTS), M, r.choice((1, 2, 4, 8)), 1, r.choice((1800, 3600, 7200)),
                        now, None, now - 100 + i, arrival=i)


def holding(holds, project: str, at: int, without: set[str]) -> int:
    return sum(h.gpus for h in holds if h.project_id == project and not h.preemptible
               and h.lease_id not in without and h.start <= at < h.end - h.allowance)


def check_world(seed: int) -> int:
    """The reclaims of the world's passes, checked; how many there were."""
    r, hosts, holds, quotas, waiting, settings, planner_settings = world(seed)
    ending: dict[str, int] = {}   # lease -> the instant it ends early (its notice's deadline)
    now, reclaims = NOW, 0
    for _ in range(PASSES):
        current = plan(now, hosts, holds, quotas, waiting, None, planner_settings, explain=False)
        takeable = frozenset(h.lease_id for h in holds if h.lease_id not in ending and h.end > now)
        decided = early_ends(now, hosts, holds, quotas, waiting, None, current, settings, takeable=takeable,
                             planner_settings=planner_settings)
        by_lease = {h.lease_id: h for h in holds}
        waits = {lr.lease_id: lr for lr in waiting}
        for k, end in enumerate(decided.ends):
            assert end.kind == "reclaimed"
            reclaims += 1
            victim, lr = by_lease[end.lease_id], waits[end.for_lease]
            # ended before it, or decided before it in this pass (at the same instant)
            gone = {lid for lid, at in ending.items() if at < end.at} | {e.lease_id for e in decided.ends[:k]}
            # just before its end, without those gone by then: over its quota, or it borrows nothing
            held = holding(holds, victim.project_id, end.at - 1, gone)
            nominal = quotas[(victim.project_id, M)].gpus
            assert held > nominal, (f"seed {seed}: {end.lease_id} of {victim.project_id} reclaimed at {end.at} "
                                    f"when its project holds {held} of its quota of {nominal}: {end}, "
                                    f"ending {ending}")
            assert not current.leases[lr.lease_id].borrowing, (seed, end)
            # (the leases ended early before it, or decided before it in this pass, end at their deadline)
            mine = [h for h in holds if h.project_id == lr.project_id and h.lease_id not in gone]
            peak = max((holding(mine, lr.project_id, t, set()) for t in
                        {end.at, *(h.start for h in mine), *(h.end for h in mine)}
                        if end.at <= t < end.at + lr.duration), default=0)
            need = lr.gpus_per_vm * lr.instances
            assert peak + need <= quotas[(lr.project_id, M)].gpus, (f"seed {seed}: {end} for a lease beyond its "
                                                                    f"project's quota: {peak} + {need}")
        ending.update((end.lease_id, end.at) for end in decided.ends)
        # applied as the engine applies them: the hold cut at the deadline
        holds = [replace(h, end=min(h.end, ending[h.lease_id] + h.allowance)) if h.lease_id in ending else h
                 for h in holds]
        now += r.randrange(1, min(settings.notice, 300))
        waiting += [asked(r, len(waiting) + i, now) for i in range(r.randint(0, 3))]   # more asked meanwhile
    return reclaims


@pytest.mark.parametrize("block", range(4))
def test_a_borrower_back_within_its_quota_is_kept(block):
    reclaims = sum(check_world(seed) for seed in range(block * 1000, (block + 1) * 1000))
    assert reclaims > 50   # the worlds do reclaim: the promise is checked


def test_a_borrower_kept_within_quota_by_an_earlier_notice_is_not_reclaimed():
    """The case the worlds found, made small: p1 (quota 2) runs x5 (1 GPU) and x0 (4), both
    borrowing. x0 is reclaimed for p2's lease; a pass later p3 asks for 4 GPUs, which x5's end
    would give it. But when x5 would end, x0 is gone: p1 holds 1 of its 2, and x5 borrows
    nothing. It was reclaimed all the same (its project looked over its quota now, x0 still
    running under notice)."""
    hosts = [Host("h0", M, 8)]
    quotas = {(p, M): QuotaLimit(p, M, gpus, borrow_gpus=4) for p, gpus in (("p1", 2), ("p2", 4), ("p3", 4))}
    settings = ReclaimSettings(reclaim_after=0, notice=300, min_runtime=0)
    holds = [Hold("x5", "p1", "h0", M, 1, NOW - 7200, NOW + 28800, borrowing=True),
             Hold("x0", "p1", "h0", M, 4, NOW - 3600, NOW + 28800, borrowing=True),
             Hold("x1", "p2", "h0", M, 2, NOW - 7200, NOW + 28800)]
    w0 = LeaseRequest("w0", "p2", M, 2, 1, 3600, NOW, None, NOW)
    first = early_ends(NOW, hosts, holds, quotas, [w0], None, plan(NOW, hosts, holds, quotas, [w0]), settings)
    assert [(e.lease_id, e.for_lease, e.at) for e in first.ends] == [("x0", "w0", NOW + 300)]
    holds = [replace(h, end=NOW + 300) if h.lease_id == "x0" else h for h in holds]
    now = NOW + 100
    w1 = LeaseRequest("w1", "p3", M, 4, 1, 3600, now, None, now, arrival=1)
    waiting = [w0, w1]
    second = early_ends(now, hosts, holds, quotas, waiting, None, plan(now, hosts, holds, quotas, waiting), settings,
                        takeable=frozenset({"x5", "x1"}))
    assert second.ends == []

"""A reclaim pass's trials (domain/reclaim_trials.py): bounded however many leases borrow, and the
check that spares most of them changes no decision."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpu_tenancy.domain import reclaim
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings, plan
from gpu_tenancy.domain.reclaim import ReclaimSettings, early_ends
from gpu_tenancy.domain.reclaim_trials import RoomOnHosts, room_by

NOW = 1_800_000_000
H = 3600
M = "A100"
SETTINGS = ReclaimSettings(reclaim_after=H, notice=15 * 60, min_runtime=H)
UNBOUNDED = replace(SETTINGS, max_trials=10 ** 9, max_trial_leases=10 ** 9)
QUOTAS = {("lender", M): QuotaLimit("lender", M, 64),
          ("other", M): QuotaLimit("other", M, 64),
          ("borrower", M): QuotaLimit("borrower", M, 4, borrow_gpus=10 ** 4)}


def borrowed(lid: str, host: str, gpus: int, start: int, end: int = NOW + 10 * H) -> Hold:
    return Hold(lid, "borrower", host, M, gpus, start, end, True, False, 0)


def asked(lid: str, gpus: int, project: str = "lender", instances: int = 1, duration: int = 2 * H) -> LeaseRequest:
    return LeaseRequest(lid, project, M, gpus, instances, duration, NOW, None, NOW - 60, 0)


def counting_plans(monkeypatch) -> list[int]:
    """The leases of every trial plan the pass makes."""
    made: list[int] = []

    def counted(*args, **kw):
        made.append(len(args[4]))
        return plan(*args, **kw)
    monkeypatch.setattr(reclaim, "plan", counted)
    return made


def many_small_borrowers(hosts: int = 20):
    """Every GPU of `hosts` 8-GPU hosts held by a one-GPU borrowed lease; newest first, they
    go round the hosts, so the first that free a whole host are most of them."""
    hs = [Host(f"h{i:02d}", M, 8) for i in range(hosts)]
    holds = [borrowed(f"b{k:03d}", f"h{k % hosts:02d}", 1, NOW - 2 * H - k * 60) for k in range(8 * hosts)]
    return hs, holds


def test_many_small_borrowers_cost_a_pass_a_bounded_number_of_trial_plans(monkeypatch):
    hs, holds = many_small_borrowers()
    waiting = [asked("l8", 8)]
    current = plan(NOW, hs, holds, QUOTAS, waiting)
    made = counting_plans(monkeypatch)
    result = early_ends(NOW, hs, holds, QUOTAS, waiting, None, current, SETTINGS)
    # The pass before: a plan per borrower alone (160), per set of the newest until one host is
    # free (141), then per one fewer (140): 442 plans of the queue for one lease. Now the borrowers
    # alone and the sets that free no host are refused without one, and the set found is narrowed
    # to the host the lease was placed on at once: 3.
    assert len(made) <= 3
    # the fewest all the same: the eight on one host
    ended = {e.lease_id for e in result.ends}
    assert len(ended) == 8 and len({x.host for x in holds if x.lease_id in ended}) == 1
    assert all(e.for_lease == "l8" for e in result.ends)


def test_a_set_found_stands_when_the_trials_run_out_before_the_fewest(monkeypatch):
    hs, holds = many_small_borrowers()
    waiting = [asked("l8", 8)]
    current = plan(NOW, hs, holds, QUOTAS, waiting)
    made = counting_plans(monkeypatch)
    # two trials: the set of all, then the newest until a host is free; none left to narrow it
    result = early_ends(NOW, hs, holds, QUOTAS, waiting, None, current, replace(SETTINGS, max_trials=2))
    ended = {e.lease_id for e in result.ends}
    assert len(made) == 2 and len(ended) > 8
    assert any({x.lease_id for x in holds if x.host == h.name} <= ended for h in hs)


def test_the_trials_place_at_most_so_many_leases(monkeypatch):
    hs, holds = many_small_borrowers(4)
    ahead = [asked(f"w{i}", 8, "other") for i in range(30)]   # others first in the order
    waiting = [*ahead, asked("l8", 8)]
    current = plan(NOW, hs, holds, QUOTAS, waiting, {("lender", M): 0.0, ("other", M): 0.0})
    made = counting_plans(monkeypatch)
    early_ends(NOW, hs, holds, QUOTAS, waiting, None, current, replace(SETTINGS, max_trial_leases=100))
    assert made and sum(made) <= 100


def test_when_the_trials_are_spent_the_leases_left_wait_for_the_next_pass(monkeypatch):
    # two leases each needing one host's borrowers ended; the second's trials find none left
    hs = [Host("h1", M, 8), Host("h2", M, 8)]
    holds = [borrowed("b1", "h1", 8, NOW - 3 * H), borrowed("b2", "h2", 8, NOW - 2 * H)]
    waiting = [asked("l1", 8), asked("l2", 8, "other")]
    current = plan(NOW, hs, holds, QUOTAS, waiting)
    both = early_ends(NOW, hs, holds, QUOTAS, waiting, None, current, SETTINGS)
    assert sorted((e.lease_id, e.for_lease) for e in both.ends) == [("b1", "l2"), ("b2", "l1")]
    made = counting_plans(monkeypatch)
    first = early_ends(NOW, hs, holds, QUOTAS, waiting, None, current, replace(SETTINGS, max_trials=len(both.ends)))
    assert [(e.lease_id, e.for_lease) for e in first.ends] == [("b2", "l1")] and len(made) == 2
    none = early_ends(NOW, hs, holds, QUOTAS, waiting, None, current, replace(SETTINGS, max_trials=1))
    assert none.ends == [] and none.etas == {}   # l1's set of all was tried; its single was not


def scenario(rng: random.Random):
    """A small cluster with borrowers, other holds and a queue (gangs among it), and the release
    allowance its holds and plans count."""
    allowance = rng.choice([0, 0, 300])
    hs = [Host(f"h{i}", M, rng.choice([4, 8, 8]), enabled=rng.random() > .1) for i in range(rng.randint(1, 5))]
    holds, k = [], 0
    for h in hs:
        free = h.gpus
        while free > 0 and rng.random() < .85:
            g = rng.randint(1, free)
            start = NOW - rng.randint(0, 6 * H)
            end = NOW + rng.randint(1, 40) * 900
            if rng.random() < .7:
                hold = borrowed(f"b{k}", h.name, g, start, end)
            else:
                hold = Hold(f"x{k}", rng.choice(["lender", "other"]), h.name, M, g, start, end, False, False, 0)
            holds.append(replace(hold, allowance=allowance))   # held the release longer, as the ledger reads it
            k += 1
            free -= g
    waiting = [asked(f"w{i}", rng.choice([1, 2, 4, 8]), rng.choice(["lender", "other"]),
                     instances=rng.choice([1, 1, 1, 2]), duration=rng.randint(1, 12) * 1800)
               for i in range(rng.randint(1, 6))]
    return hs, holds, waiting, PlannerSettings(release_allowance=allowance)


@pytest.mark.parametrize("chunk", range(4))
def test_the_check_changes_no_decision(chunk, monkeypatch):
    """The same ends, notes and ETAs with the check as with a plan for every set (and the
    reasons planned, as before), on seeded clusters; and the check spared plans."""
    decided, checked, every_set = 0, 0, 0
    for seed in range(chunk * 100, chunk * 100 + 100):
        hs, holds, waiting, ps = scenario(random.Random(seed))
        usage = {("lender", M): 1.0, ("other", M): 2.0}
        current = plan(NOW, hs, holds, QUOTAS, waiting, usage, ps)
        with monkeypatch.context() as mp:
            made = counting_plans(mp)
            got = early_ends(NOW, hs, holds, QUOTAS, waiting, usage, current, UNBOUNDED, planner_settings=ps)
            checked += len(made)
        with monkeypatch.context() as mp:
            mp.setattr(RoomOnHosts, "allows", lambda *a: True)
            mp.setattr(reclaim, "room_by", lambda *a: True)
            made = []
            mp.setattr(reclaim, "plan", lambda *a, **kw: made.append(1) or plan(*a))   # with its reasons
            want = early_ends(NOW, hs, holds, QUOTAS, waiting, usage, current, UNBOUNDED, planner_settings=ps)
            every_set += len(made)
        assert (got.ends, got.notes, got.etas) == (want.ends, want.notes, want.etas), seed
        decided += bool(want.ends or want.etas)
    assert decided >= 10   # reclaims were decided: the comparison had something to compare
    assert checked < every_set


@pytest.mark.parametrize("seed", range(40))
def test_the_one_vm_check_answers_as_the_index_does(seed):
    rng = random.Random(seed)
    hs, holds, _, ps = scenario(rng)
    lr = asked("l", rng.choice([1, 2, 4, 8]), duration=rng.randint(1, 12) * 1800)
    allowance = ps.release_allowance
    room = RoomOnHosts(NOW, hs, holds, lr, allowance)
    mine = [h for h in holds if h.lease_id.startswith("b")]
    for _ in range(30):
        victims = rng.sample(mine, rng.randint(0, len(mine))) if mine else []
        at = NOW + rng.choice([0, 900, 3600])
        by = at + allowance + rng.choice([0, 0, 600])
        gone = {v.lease_id for v in victims}
        cut = [replace(h, end=min(h.end, at + h.allowance)) if h.lease_id in gone else h for h in holds]
        ended: dict[str, list[Hold]] = {}
        for v in victims:
            ended.setdefault(v.host, []).append(v)
        assert room.allows(ended, at, by) == room_by(NOW, hs, cut, lr, by, allowance), (seed, sorted(gone), at, by)

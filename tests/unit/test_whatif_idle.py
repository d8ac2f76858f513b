"""The replay's idle model (whatif/idle.py): a lease idle after its run holds its GPUs to
its asked end, or, under an idle rule `end after X`, to its real end + X capped at the
asked end; the idle share is a seeded draw; the GPU-hours held and returned; and, in a
replay, the lease waiting behind an idle one starts when the rule ends it."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.gpu_activity import IdleRule
from gpu_tenancy.domain.model import QuotaLimit
from gpu_tenancy.whatif.event_loop import simulate
from gpu_tenancy.whatif.history import Lease
from gpu_tenancy.whatif.idle import (end_rule, held_for, idle_hours, idle_share, released_after,
                                     with_idle)
from gpu_tenancy.whatif.planner_sched import MODEL, GpuTenancy

H, M = 3600, 60


def lease(jid: str, runtime: int, asked: int, gpus: int = 8, arrival: int = 0) -> Lease:
    return Lease(jid, "p", arrival, runtime, gpus, 1, asked=asked)


def test_an_idle_lease_ends_x_minutes_after_its_real_end():
    assert held_for(1 * H, 4 * H, True, end_rule(30)) == 1 * H + 30 * M
    assert held_for(1 * H, 4 * H, True, end_rule(60)) == 2 * H


def test_the_rule_never_ends_an_idle_lease_after_its_asked_end():
    assert held_for(1 * H, 1 * H + 20 * M, True, end_rule(30)) == 1 * H + 20 * M


def test_without_a_rule_an_idle_lease_holds_to_its_asked_end():
    assert held_for(1 * H, 4 * H, True, None) == 4 * H
    # a rule that only warns gives nothing back either
    assert held_for(1 * H, 4 * H, True, IdleRule(warn_after=10 * M)) == 4 * H


def test_a_lease_not_idle_or_asking_no_more_than_it_runs_ends_at_its_real_end():
    assert held_for(1 * H, 4 * H, False, None) == 1 * H
    assert held_for(1 * H, 4 * H, False, end_rule(30)) == 1 * H
    assert held_for(1 * H, 1 * H, True, None) == 1 * H


def test_the_end_follows_the_rules_then_after_not_its_warning():
    # idle_step ends a lease at then_after idle seconds, the warning given at warn_after
    assert released_after(end_rule(30)) == 30 * M
    assert released_after(IdleRule(warn_after=29 * M, then="end", then_after=30 * M)) == 30 * M
    assert released_after(IdleRule(warn_after=1 * M, then="end", then_after=90 * M)) == 90 * M
    assert released_after(IdleRule(warn_after=10 * M)) is None
    assert released_after(None) is None


def test_held_is_between_the_run_and_the_asked_end_seeded():
    rnd = random.Random(20)
    for _ in range(500):
        run = rnd.randint(1, 5 * H)
        asked = run + rnd.choice([0, rnd.randint(1, 10 * H)])
        x = rnd.choice([2, 5, 30, 60, 240])
        assert held_for(run, asked, True, end_rule(x)) == min(asked, run + x * M)
        assert held_for(run, asked, True, None) == asked
        assert held_for(run, asked, False, end_rule(x)) == run


def test_the_idle_share_is_a_deterministic_seeded_draw_per_lease():
    ids = [f"p{i:05d}" for i in range(10_000)]
    a = idle_share(ids, 0.3, seed=7)
    assert a == idle_share(list(reversed(ids)), 0.3, seed=7)           # the order does not matter
    assert idle_share(ids[:100], 0.3, seed=7) == a & set(ids[:100])     # nor which others are there
    assert idle_share(ids, 0.3, seed=8) != a
    assert 2800 < len(a) < 3200
    assert idle_share(ids, 0.6, seed=7) >= a                           # a larger share adds leases
    assert idle_share(ids, 0.0) == frozenset() and idle_share(ids, 1.0) == frozenset(ids)
    with pytest.raises(ValueError):
        idle_share(ids, 1.5)


def test_gpu_hours_held_idle_and_returned_on_a_hand_built_history():
    jobs = [lease("a", 1 * H, 3 * H, gpus=2),             # idle 2 h on 2 GPUs: 4 GPU-h
            lease("b", 1 * H, 1 * H + 20 * M, gpus=3),    # idle 20 min on 3 GPUs: 1 GPU-h
            lease("c", 1 * H, 5 * H, gpus=8),             # not idle: gpu-done at its real end
            lease("d", 2 * H, 2 * H, gpus=4)]             # asked what it ran: no idle tail
    idle = frozenset({"a", "b", "d"})
    h = idle_hours(jobs, idle, end_rule(30))
    assert h.held_idle == pytest.approx(5.0)
    # with the rule: a holds 30 min idle on 2 GPUs (1 GPU-h), b its whole 20 min (1 GPU-h)
    assert h.still_idle == pytest.approx(2.0)
    assert h.returned == pytest.approx(3.0)
    assert idle_hours(jobs, idle, None).returned == 0
    held = {j.jid: j.runtime for j in with_idle(jobs, idle, end_rule(30))}
    assert held == {"a": 1 * H + 30 * M, "b": 1 * H + 20 * M, "c": 1 * H, "d": 2 * H}


def test_the_lease_behind_an_idle_one_starts_when_the_rule_ends_it():
    """One host of 8 GPUs: `a` runs 1 h of the 4 h it asked for and then sits idle; `b`
    asks for the host 10 minutes in. Both plans tell b the asked end (the planner cannot
    know); b starts at a's asked end without a rule, at its real end + 30 min with one."""
    jobs = [lease("a", 1 * H, 4 * H), lease("b", 1 * H, 1 * H, arrival=10 * M)]
    quotas = {("p", MODEL): QuotaLimit("p", MODEL, 8, 0, None, 1.0)}
    starts, etas = {}, {}
    for name, rule in (("none", None), ("30", end_rule(30))):
        sched = GpuTenancy(quotas)
        out = simulate(with_idle(jobs, frozenset({"a"}), rule), 1, sched)
        starts[name], etas[name] = out.start["b"], (out.first_eta or {})["b"]
    assert etas == {"none": 4 * H, "30": 4 * H}
    assert starts == {"none": 4 * H, "30": 1 * H + 30 * M}

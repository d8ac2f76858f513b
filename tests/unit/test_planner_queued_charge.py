"""The queued charge (PlannerSettings.queued_charge, domain/queued_charge.py): a light tenant's
flood, which fair share alone puts wholly before a heavy tenant's big lease, goes before it only
until the flood's committed GPU-hours pass the heavy tenant's use; the order of one project's
leases never changes."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.offers import OfferRules, ShapeOption, offers
from gpu_tenancy.domain.plan_insert import Planned, PlanBook
from gpu_tenancy.domain.planner import PlannerSettings, order_key, plan
from gpu_tenancy.domain.queued_charge import NewLeaseCharge, queued_charges
from gpu_tenancy.whatif.event_loop import simulate
from gpu_tenancy.whatif.history import Lease
from gpu_tenancy.whatif.planner_sched import GpuTenancy, quota_limits

H = 3600
BIG_AT = 12 * H


def world(flood: int) -> list[Lease]:
    """Two 8-GPU hosts. The heavy tenant fills both for 10 h (160 GPU-hours); at 11 h the light
    tenant asks for `flood` leases of 1 GPU for 4 h at once; at 12 h the heavy tenant asks for
    one whole host for 2 h."""
    jobs = [Lease(f"h{i}", "heavy", 0, 10 * H, 8, 1, seq=i) for i in range(2)]
    jobs.append(Lease("big", "heavy", BIG_AT, 2 * H, 8, 1, seq=2))
    jobs += [Lease(f"s{i}", "light", 11 * H + i, 4 * H, 1, 1, seq=3 + i) for i in range(flood)]
    return sorted(jobs, key=lambda j: (j.arrival, j.seq))


def big_wait(settings: PlannerSettings, flood: int = 100) -> int:
    out = simulate(world(flood), 2, GpuTenancy(quota_limits({"heavy": .5, "light": .5}, 16, "open"),
                                                settings=settings))
    return out.start["big"] - BIG_AT


def test_a_big_lease_behind_a_lighter_tenants_flood_goes_at_the_next_host_free():
    starved = big_wait(PlannerSettings())
    charged = big_wait(PlannerSettings(queued_charge=4))
    # fair share alone: until the light tenant has used about the heavy tenant's 160 GPU-hours
    assert starved > 10 * H, starved
    # charged: the flood's first 16 run, a few more go first, then the big lease takes the first host
    # their 4 h free (at 15 h)
    assert charged <= 3 * H + 60, charged
    # charged 1x, its turn comes later (more of the flood is still under the heavy tenant's use)
    assert charged < big_wait(PlannerSettings(queued_charge=1)) < starved


def _lr(lid: str, project: str, gpus: int, hours: float, created: int, **kw) -> LeaseRequest:
    return LeaseRequest(lid, project, "A100", gpus, 1, round(hours * H), created, None, created, **kw)


def test_the_charge_is_what_the_project_holds_from_now_and_has_queued_ahead():
    now = 10 * H
    quotas = {("p", "A100"): QuotaLimit("p", "A100", 16, weight=2.0)}
    holds = [Hold("run", "p", "h1", "A100", 4, now - H, now + 3 * H),        # 12 GPU-hours from now
             Hold("done", "p", "h1", "A100", 4, now - 2 * H, now),          # over: nothing
             Hold("pre", "p", "h2", "A100", 8, now, now + H, preemptible=True)]
    waiting = [_lr("b", "p", 2, 1, now - 10), _lr("a", "p", 1, 2, now - 20), _lr("c", "p", 8, 1, now),
               _lr("x", "p", 8, 5, now - 30, preemptible=True), _lr("hi", "p", 1, 1, now, priority=1)]
    assert queued_charges(waiting, holds, now, quotas, None) == {}
    # own order: hi (priority), a, b, c; charge 0.5 over weight 2
    assert queued_charges(waiting, holds, now, quotas, 0.5) == pytest.approx(
        {"hi": 0.5 * 12 / 2, "a": 0.5 * 13 / 2, "b": 0.5 * 15 / 2, "c": 0.5 * 17 / 2})


def test_spared_leases_are_not_charged_but_count_for_those_after_them():
    now = 10 * H
    quotas = {("p", "A100"): QuotaLimit("p", "A100", 64)}
    holds = [Hold("run", "p", "h1", "A100", 8, now - H, now + 2 * H)]   # 16 GPU-hours from now
    waiting = [_lr("a", "p", 1, 2, now - 30), _lr("big", "p", 8, 1, now - 20),
               LeaseRequest("gang", "p", "A100", 4, 2, H, now - 10, None, now - 10),   # 2 VMs x 4 GPUs
               _lr("b", "p", 1, 1, now)]
    # spared by GPUs per VM: the gang's 8 GPUs in all need no host drained, it is charged
    assert queued_charges(waiting, holds, now, quotas, 1, spared_gpus=8) == pytest.approx(
        {"a": 16, "big": 0, "gang": 16 + 2 + 8, "b": 16 + 2 + 8 + 8})
    # the spared big lease of a heavy tenant, on its plain score, goes before a charged light flood
    light = [_lr(f"s{i}", "light", 1, 4, now - H, arrival=i) for i in range(4)]
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 64) for p in ("heavy", "light")}
    usage = {("heavy", "A100"): 10.0}
    held = [Hold("run", "heavy", "h1", "A100", 8, now - H, now + 5 * H),
            Hold("lrun", "light", "h2", "A100", 4, now - H, now + 5 * H)]   # 40 and 20 GPU-hours held
    big = _lr("big", "heavy", 8, 1, now)
    hosts = [Host(f"h{i}", "A100", 8) for i in range(1, 4)]
    for spares, where in ((None, 4), (8, 0)):
        p = plan(now, hosts, held, quotas, [big, *light], usage,
                 PlannerSettings(queued_charge=1, queued_charge_spares_gpus=spares), explain=False)
        assert list(p.leases).index("big") == where, spares


def test_in_the_order_the_flood_goes_first_only_up_to_the_heavy_tenants_use():
    now = 12 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in ("heavy", "light")}
    usage = {("heavy", "A100"): 120.0, ("light", "A100"): 0.0}
    waiting = [_lr("big", "heavy", 8, 2, now)] + [_lr(f"s{i:02d}", "light", 1, 4, 11 * H, arrival=i)
                                                   for i in range(20)]
    hosts = [Host("h1", "A100", 8), Host("h2", "A100", 8)]
    alone = plan(now, hosts, [], quotas, waiting, usage, PlannerSettings(), explain=False)
    assert list(alone.leases)[-1] == "big"
    settings = PlannerSettings(queued_charge=4)
    charged = plan(now, hosts, [], quotas, waiting, usage, settings, explain=False)
    # s00..s07 are charged 4 x (0, 4, ..., 28) GPU-hours < 120, s08 on 4 x 32 = 128 > 120
    assert list(charged.leases).index("big") == 8
    # order_key, given the charges, orders them alike
    by = queued_charges(waiting, [], now, quotas, 4)
    keyed = sorted(waiting, key=lambda lr: order_key(lr, quotas, usage, now, settings, charged=by))
    assert [lr.lease_id for lr in keyed] == list(charged.leases)
    # and the big lease's start comes forward: the host the 8 before it leave, now
    assert charged.leases["big"].eta == now
    assert alone.leases["big"].eta == now + 4 * H


@pytest.mark.parametrize("seed", range(20))
def test_one_projects_leases_keep_their_order(seed):
    rng = random.Random(seed)
    now = 100 * H
    projects = ["p", "q", "r"]
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 64, weight=rng.choice([0.5, 1.0, 2.0])) for p in projects}
    usage = {(p, "A100"): rng.uniform(0, 200) for p in projects}
    waiting = [_lr(f"l{i:02d}", rng.choice(projects), rng.choice([1, 2, 8]), rng.choice([1, 4, 24]),
                   now - rng.randint(0, 50) * H, arrival=i) for i in range(30)]
    hosts = [Host(f"h{i}", "A100", 8) for i in range(4)]
    p = plan(now, hosts, [], quotas, waiting, usage, PlannerSettings(queued_charge=rng.choice([0.5, 1, 8])))
    by_created = {lr.lease_id: (lr.created_at, lr.arrival) for lr in waiting}
    for proj in projects:
        mine = [lid for lid in p.leases if lid in {lr.lease_id for lr in waiting if lr.project_id == proj}]
        assert mine == sorted(mine, key=by_created.__getitem__), (seed, proj)


def test_the_reasons_say_that_the_charge_counts():
    now = 12 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in ("heavy", "light")}
    usage = {("heavy", "A100"): 120.0}
    waiting = [_lr("big", "heavy", 8, 2, now), _lr("small", "light", 8, 4, now - H)]
    p = plan(now, [Host("h1", "A100", 8)], [], quotas, waiting, usage, PlannerSettings(queued_charge=1))
    assert [r.message for r in p.leases["big"].reasons if r.code == "fairshare"] == [
        "project heavy has used 120 A100 GPU-hours recently against weight 1, and holds or has queued nothing "
        "ahead of this lease (the queued charge); 1 lease of projects that used or committed less (in all, over "
        "weight) go first"]


def test_the_reasons_count_a_projects_own_earlier_lease_as_its_own():
    """p's b is charged for p's earlier a: a goes first as p's own lease, not as one of a project that
    used less; q, which used more but committed less, is the one counted as such."""
    now = 12 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in "pq"}
    usage = {("p", "A100"): 10.0, ("q", "A100"): 12.0}
    waiting = [_lr("a", "p", 1, 4, now - 2 * H), _lr("b", "p", 1, 4, now - H), _lr("c", "q", 1, 4, now - H)]
    hosts, holds = [Host("h1", "A100", 8)], [Hold("run", "r", "h1", "A100", 8, now - H, now + H)]
    off = plan(now, hosts, holds, quotas, waiting, usage, PlannerSettings())
    assert list(off.leases) == ["a", "b", "c"]
    assert [r.message for r in off.leases["b"].reasons if r.code in ("fairshare", "order")] == [
        "behind 1 lease submitted earlier"]   # the default's words, as they were
    on = plan(now, hosts, holds, quotas, waiting, usage, PlannerSettings(queued_charge=1))
    assert list(on.leases) == ["a", "c", "b"]   # b's score: 10 + 4 GPU-hours ahead of it > 12
    assert [(r.code, r.message) for r in on.leases["b"].reasons if r.code in ("fairshare", "order")] == [
        ("fairshare", "project p has used 10 A100 GPU-hours recently against weight 1, and holds or has queued "
                      "4.0 more ahead of this lease, counted 1x (the queued charge); 1 lease of projects that used "
                      "or committed less (in all, over weight) go first"),
        ("order", "behind 1 lease of its own project that goes first: asked earlier (the queued charge grows "
                  "along a project's queue), or preemptible (never charged)")]
    spared = plan(now, hosts, holds, quotas, [*waiting, _lr("big", "p", 8, 1, now)], usage,
                  PlannerSettings(queued_charge=1, queued_charge_spares_gpus=8))
    assert [r.message for r in spared.leases["big"].reasons if r.code == "fairshare"] == []   # first of fair share
    assert [r.message for r in spared.leases["b"].reasons if r.code == "order"] == [
        "behind 2 leases of its own project that go first: asked earlier (the queued charge grows along a "
        "project's queue), or preemptible (never charged), or of 8 GPUs per VM or more (spared the queued charge)"]


def test_a_preemptible_lease_ahead_of_its_projects_own_is_said_to_be_never_charged():
    """A preemptible lease pays no charge: asked later, it still goes before its project's charged
    leases, and their reason names that cause too (it said only "asked earlier")."""
    now = 12 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in "pq"}
    usage = {("p", "A100"): 10.0, ("q", "A100"): 1.0}
    hosts, holds = [Host("h1", "A100", 8)], [Hold("run", "p", "h1", "A100", 8, now - H, now + 4 * H)]
    waiting = [_lr("a", "p", 4, 1, now - 2 * H), _lr("c", "q", 4, 1, now - H),
               _lr("pre", "p", 4, 1, now - H // 2, preemptible=True)]
    got = plan(now, hosts, holds, quotas, waiting, usage, PlannerSettings(queued_charge=1))
    own = [r.message for r in got.leases["a"].reasons if r.code == "order"]
    assert own and "preemptible (never charged)" in own[0]


def test_a_new_lease_before_its_projects_spared_one_leaves_the_fit_exact():
    """A spared lease is charged nothing whatever is ahead of it: a new lease asked before it (a
    create that raced it) moves no key, and the fit is plan()'s."""
    now = 100 * H
    quotas = {("p", "A100"): QuotaLimit("p", "A100", 64)}
    hosts = [Host("h1", "A100", 8), Host("h2", "A100", 8)]
    holds = [Hold("run", "p", "h1", "A100", 8, now - H, now + 2 * H), Hold("run2", "p", "h2", "A100", 8, now - H, now + 2 * H)]
    settings = PlannerSettings(queued_charge=4.0, queued_charge_spares_gpus=8)
    spared = LeaseRequest("S", "p", "A100", 8, 1, H, now, None, now - 5, arrival=1)
    new = LeaseRequest("N", "p", "A100", 1, 1, H, now, None, now - 10, arrival=2)
    full = plan(now, hosts, holds, quotas, [spared], {}, settings)
    book = PlanBook(now, hosts, holds, quotas, [Planned(spared, full.leases["S"].placement)], {}, settings)
    got = book.insert(now, new)
    ref = plan(now, hosts, holds, quotas, [spared, new], {}, settings)
    assert got.last and got.exact
    assert got.planned.placement == ref.leases["N"].placement
    assert not any(r.code == "provisional" for r in got.planned.reasons)


def test_an_offer_tried_out_of_its_turn_is_charged_as_in_plan():
    """p's earlier lease Y is not ahead of the 1x4 alternative, yet it counts in the charge of p's
    X, which is: the alternative's trial plans X in plan()'s place (before it), not after it."""
    now = 1_800_000_000
    m = "A100"
    quotas = {(p, m): QuotaLimit(p, m, 64) for p in "pqr"}
    usage = {("p", m): 100.0, ("q", m): 10.0, ("r", m): 20.0}
    waiting = [LeaseRequest("Y", "p", m, 1, 1, 10 * H, now - H, None, now - H, arrival=0),
               LeaseRequest("X", "p", m, 4, 1, 5 * H, now - 3240, None, now - 3240, arrival=1),
               LeaseRequest("Z", "q", m, 4, 1, 2 * H, now, None, now, arrival=2)]
    hosts = [Host("h1", m, 8)]
    holds = [Hold("rh", "r", "h1", m, 1, now - H, now + H)]
    settings = PlannerSettings(queued_charge=4.0, age_size_gpu_hours=1.0, queued_charge_spares_gpus=8)
    shape = ShapeOption("x4", m, 4)
    ask = LeaseRequest("ask", "r", m, 4, 2, H, now, None, now, arrival=2 ** 62)
    got = offers(now, hosts, holds, quotas, waiting, usage, settings, ask, shape, [shape], OfferRules())
    assert got.offers
    for off in got.offers:
        taken = LeaseRequest("taken", "r", m, off.gpus_per_vm, off.instances, off.duration,
                             off.start if off.reserve else ask.earliest_start, None, now, arrival=2 ** 62)
        with_it = plan(now, hosts, holds, quotas, [*waiting, taken], usage, settings).leases["taken"]
        assert with_it.placement is not None and with_it.placement.start == off.start, (off.kind, off.start - now)


@pytest.mark.parametrize("seed", range(20))
def test_a_new_leases_charge_from_the_running_totals_is_the_whole_queues(seed):
    rng = random.Random(seed)
    now = 100 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 64, weight=rng.choice([0.0, 0.5, 1.0, 2.0])) for p in "pq"}
    holds = [Hold(f"h{i}", rng.choice("pqr"), "h1", "A100", rng.randint(1, 8), now - H, now + rng.randint(-1, 9) * H,
                  preemptible=rng.random() < 0.2) for i in range(rng.randint(0, 4))]

    def lease(lid: str) -> LeaseRequest:
        return LeaseRequest(lid, rng.choice("pqr"), "A100", rng.choice([1, 2, 8]), rng.choice([1, 1, 2]),
                            rng.choice([1, 4, 24]) * H, now, None, now - rng.randint(0, 5) * H,
                            priority=rng.choice([0, 0, 1]), arrival=rng.randint(0, 3),
                            preemptible=rng.random() < 0.2)
    waiting = [lease(f"w{i}") for i in range(rng.randint(0, 12))]
    spares = rng.choice([None, 2, 8])
    charge_of = NewLeaseCharge(waiting, holds, now, quotas, 2.0, spares)
    for i in range(10):
        new = lease(f"new{i}")
        assert charge_of(new) == queued_charges([*waiting, new], holds, now, quotas, 2.0, spares).get(new.lease_id, 0.0)
    assert NewLeaseCharge(waiting, holds, now, quotas, None)(lease("off")) == 0.0


def test_a_light_tenants_gangs_of_small_vms_do_not_escape_the_charge():
    """Two gangs of eight 1-GPU VMs (8 GPUs each, in all) are charged like the 1-GPU leases they
    bundle: the heavy tenant's whole-host lease, spared, goes before the second one."""
    now = 12 * H
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 64) for p in ("heavy", "light")}
    usage = {("heavy", "A100"): 40.0}
    gangs = [LeaseRequest(f"g{i}", "light", "A100", 1, 8, 4 * H, now - H, None, now - H, arrival=i) for i in range(2)]
    big = _lr("big", "heavy", 8, 2, now)
    settings = PlannerSettings(queued_charge=2, queued_charge_spares_gpus=8)
    assert queued_charges([*gangs, big], [], now, quotas, 2, spared_gpus=8) == pytest.approx(
        {"g0": 0, "g1": 2 * 32, "big": 0})
    p = plan(now, [Host(f"h{i}", "A100", 8) for i in range(2)], [], quotas, [*gangs, big], usage, settings,
             explain=False)
    assert list(p.leases) == ["g0", "big", "g1"]


@pytest.mark.parametrize("seed", range(10))
def test_the_charges_do_not_depend_on_the_order_holds_come_in(seed):
    rng = random.Random(seed)
    now = 100 * H
    quotas = {("p", "A100"): QuotaLimit("p", "A100", 64, weight=3.0)}
    # hours that are not sums of powers of two: a float sum in another order can differ in its last bit
    holds = [Hold(f"h{i}", "p", "h1", "A100", rng.randint(1, 8), now - H, now + rng.randint(1, 10**6) // 7 * 3)
             for i in range(30)]
    waiting = [_lr("a", "p", 1, 1, now)]
    first = queued_charges(waiting, holds, now, quotas, 0.1)
    for _ in range(5):
        rng.shuffle(holds)
        assert queued_charges(waiting, holds, now, quotas, 0.1) == first   # exactly

"""Every counter-offer starts exactly where the whole plan puts that lease (domain/offers.py):
seeded random clouds, queues, quotas and fair-share usage, with and without a wait bound.
An offer is tried as one insertion after the leases ahead of it; this checks it against
plan() run with the offered lease added to the waiting ones. A fitted create's offers
(offers_after, tried after every lease of the current plan) are never earlier than that."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain import offers as offers_module
from gpu_tenancy.domain.offers import Kind, Offer, OfferRules, ShapeOption, offers, offers_after
from gpu_tenancy.domain.plan_insert import Planned, PlanBook
from gpu_tenancy.domain.planner import PlannerSettings, plan

NOW, H = 1_800_000_000, 3600
MODELS = ("A100", "H100", "L40")
PROJECTS = ("p", "q", "r")
SHAPES = [ShapeOption(f"{m.lower()}.x{g}", m, g) for m in MODELS for g in (1, 2, 4)]
RULES = OfferRules(gpu_memory_gb={"A100": 80, "H100": 80, "L40": 48})


def world(rng: random.Random):
    hosts = [Host(f"{m}-{i}", m, rng.choice((2, 4, 8)), enabled=rng.random() > 0.1)
             for m in MODELS for i in range(rng.randint(1, 3))]
    holds = []
    for i in range(rng.randint(0, 8)):
        h = rng.choice(hosts)
        start = NOW + rng.choice((-2 * H, 0, rng.randint(0, 20) * H))
        holds.append(Hold(f"hold-{i}", rng.choice(PROJECTS), h.name, h.gpu_model, rng.randint(1, h.gpus), start,
                          start + rng.randint(1, 24) * H, borrowing=rng.random() < 0.2))
    quotas = {(p, m): QuotaLimit(p, m, rng.choice((2, 4, 8, 16)), rng.choice((0, 0, 2, 4)), None,
                                 rng.choice((1.0, 2.0)))
              for p in PROJECTS for m in MODELS if rng.random() < 0.85}
    waiting = [LeaseRequest(f"w{i}", rng.choice(PROJECTS), rng.choice(MODELS), rng.choice((1, 2, 4)),
                            rng.choice((1, 1, 2)), rng.randint(1, 16) * H, NOW + rng.choice((0, 0, 3 * H)), None,
                            NOW - rng.randint(0, 48) * H, priority=rng.choice((0, 0, 1)), arrival=i)
               for i in range(rng.randint(0, 10))]
    usage = {(p, m): rng.random() * 100 for p in PROJECTS for m in MODELS}
    return hosts, holds, quotas, waiting, usage


@pytest.mark.parametrize("settings", [
    PlannerSettings(), PlannerSettings(wait_bound=6 * H, wait_bound_leases=2),
    # every lease past the bound at once: a reserved start is not, so it is tried out of the plan's turn
    PlannerSettings(wait_bound=0, wait_bound_leases=1), PlannerSettings(wait_bound_gpu_hours=0),
    PlannerSettings(queued_charge=1.0), PlannerSettings(empty_together=True),
    # the charge with age x size: a trial out of the plan's turn orders its leases by the whole queue's charges
    PlannerSettings(queued_charge=4.0, age_size_gpu_hours=1.0, queued_charge_spares_gpus=4),
    PlannerSettings(queued_charge=4.0, age_size_gpu_hours=1.0, wait_bound=6 * H, wait_bound_leases=2)],
    ids=["no-bound", "bound", "bound-0", "gpu-hours-0", "queued-charge", "empty-together", "charge-age-spares", "charge-age-bound"])
def test_each_offer_starts_where_the_whole_plan_puts_it(settings, monkeypatch):
    tried = [0]
    place = offers_module._Places.place

    def counted(self, lr):
        tried[0] += 1
        return place(self, lr)
    monkeypatch.setattr(offers_module._Places, "place", counted)
    zero_bound = 0 in (settings.wait_bound, settings.wait_bound_gpu_hours)
    kinds, checked = set(), 0
    for seed in range(300):
        rng = random.Random(seed)
        hosts, holds, quotas, waiting, usage = world(rng)
        shape = rng.choice(SHAPES)
        ask = LeaseRequest("ask", "p", shape.gpu_model, shape.gpus, rng.choice((1, 2, 3)), rng.randint(2, 30) * H,
                           NOW + rng.choice((0, 0, 2 * H)), None, NOW, arrival=2 ** 62)
        tried[0] = 0
        offered = offers(NOW, hosts, holds, quotas, waiting, usage, settings, ask, shape, SHAPES, RULES)
        assert tried[0] <= RULES.most_trials(ask.duration), (seed, tried[0])   # the work is bounded
        got = offered.offers
        assert len(got) <= RULES.most
        dry_run = plan(NOW, hosts, holds, quotas, [*waiting, ask], usage, settings)
        assert offered.plan.leases == dry_run.leases, seed   # the offers' plan is the dry run's, reasons and all
        asked = dry_run.leases["ask"].placement
        if got:
            assert asked is None or asked.start > max(NOW, ask.earliest_start), seed
        for o in got:
            kinds.add(o.kind)
            taken = LeaseRequest("taken", "p", o.gpu_model, o.gpus_per_vm, o.instances, o.duration,
                                 o.start if o.reserve else ask.earliest_start, None, NOW, arrival=2 ** 62)
            placed = plan(NOW, hosts, holds, quotas, [*waiting, taken], usage, settings).leases["taken"]
            assert placed.placement is not None and placed.placement.start == o.start, (seed, o)
            assert placed.borrowing == o.borrowing, (seed, o)
            if o.kind is not Kind.LATER:
                assert asked is None or o.start < asked.start, (seed, o)
            else:
                # its planned start, reserved; with a bound of 0 the ask goes before fair share and a
                # reservation (not waiting yet) does not, so it may be placed later
                assert asked is not None and (o.start == asked.start if not zero_bound else o.start >= asked.start)
            checked += 1
    assert checked > 100 and kinds == set(Kind), (checked, kinds)


def test_a_preemptible_ask_is_offered_nothing():
    """A preemptible lease runs on idle GPUs only, out of quota, and is never tried as an
    alternative (planner.Trials): it has no counter-offers, and its dry run is the plan's,
    as a create that waits computes it (the trial at its turn once disagreed with the plan
    there and the offers failed)."""
    waited = 0
    for seed in range(300):
        rng = random.Random(seed)
        hosts, holds, quotas, waiting, usage = world(rng)
        shape = rng.choice(SHAPES)
        ask = LeaseRequest("ask", "p", shape.gpu_model, shape.gpus, rng.choice((1, 2, 3)), rng.randint(2, 30) * H,
                           NOW + rng.choice((0, 0, 2 * H)), None, NOW, priority=-100, preemptible=True,
                           arrival=2 ** 62)
        offered = offers(NOW, hosts, holds, quotas, waiting, usage, PlannerSettings(), ask, shape, SHAPES, RULES)
        dry_run = plan(NOW, hosts, holds, quotas, [*waiting, ask], usage, PlannerSettings())
        assert offered.plan.leases == dry_run.leases and offered.offers == [], seed
        asked = dry_run.leases["ask"].placement
        waited += asked is not None and asked.start > max(NOW, ask.earliest_start)
    assert waited > 20, waited   # the case that matters: it waits for idle GPUs


def as_lease(o: Offer, ask: LeaseRequest) -> LeaseRequest:
    """The lease taking offer `o` makes (engine/offers.applied)."""
    return LeaseRequest("taken", ask.project_id, o.gpu_model, o.gpus_per_vm, o.instances, o.duration,
                        o.start if o.reserve else ask.earliest_start, None, ask.created_at, arrival=ask.arrival)


def test_a_fitted_offer_is_never_earlier_than_the_whole_plans():
    """The offers of a create fitted into the current plan (engine/offers.on_plan: each
    alternative tried after every lease of that plan, PlanBook.trial) against the exact ones
    of a full plan (offers()): each fitted offer starts no earlier than plan() starts the lease
    it makes (where plan() puts it before some leases, they have not taken capacity yet), and
    no earlier than the full plan's offer of its kind (its GPU model, its planned start
    reserved, borrowing now); a shorter lease is no longer. The plan is exact: the engine's
    full plan, with leases fitted in last of their model's order since."""
    compared, fits, kinds = 0, 0, set()
    for seed in range(400):
        rng = random.Random(seed)
        hosts, holds, quotas, waiting, usage = world(rng)
        settings = PlannerSettings(release_allowance=rng.choice((0, 0, 60)))
        full = plan(NOW, hosts, holds, quotas, waiting, usage, settings)
        by_id = {lr.lease_id: lr for lr in waiting}
        book = PlanBook(NOW, hosts, holds, quotas, [Planned(by_id[i], p.placement, p.borrowing)
                                                   for i, p in full.leases.items()], usage, settings)
        everyone = list(waiting)
        for i in range(rng.choice((0, 0, 1, 2))):   # creates fitted in since the engine's plan
            made = LeaseRequest(f"fit{i}", rng.choice(PROJECTS), rng.choice(MODELS), rng.choice((1, 2, 4)), 1,
                                rng.randint(1, 8) * H, NOW, None, NOW, arrival=2 ** 61 + i)
            book.insert(NOW, made)
            everyone.append(made)
        if not all(book.exact[m] for m in MODELS):
            continue   # fitted in out of order: the next full plan may move anything (plan_insert.provisional)
        shape = rng.choice(SHAPES)
        ask = LeaseRequest("ask", "p", shape.gpu_model, shape.gpus, rng.choice((1, 2, 3)), rng.randint(2, 30) * H,
                           NOW + rng.choice((0, 0, 2 * H)), None, NOW, arrival=2 ** 62)
        fitted = offers_after(NOW, lambda lr: book.trial(NOW, lr), ask, shape, SHAPES, RULES)
        exact = {o.gpu_model if o.kind is Kind.GPU_MODEL else o.kind: o
                 for o in offers(NOW, hosts, holds, quotas, everyone, usage, settings, ask, shape, SHAPES,
                                 RULES).offers}
        fits += len(everyone) > len(waiting)
        for o in fitted:
            kinds.add(o.kind)
            placed = plan(NOW, hosts, holds, quotas, [*everyone, as_lease(o, ask)], usage, settings).leases["taken"]
            assert placed.placement is not None and placed.placement.start <= o.start, (seed, o, placed)
            same = exact.get(o.gpu_model if o.kind is Kind.GPU_MODEL else o.kind)
            if same is not None and o.kind is not Kind.FEWER_INSTANCES and o.kind is not Kind.FEWER_GPUS:
                # a smaller size is the largest that starts sooner than the ask: it may differ in size
                assert o.start >= same.start, (seed, o, same)
                assert o.kind is not Kind.SHORTER or o.duration <= same.duration, (seed, o, same)
                compared += 1
    assert compared > 100 and fits > 20 and kinds == set(Kind), (compared, fits, kinds)

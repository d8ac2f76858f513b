"""Counter-offers (domain/offers.py): the issue's case, and what each kind offers."""
from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from gpu_tenancy.config import Config
from gpu_tenancy.engine.offers import OfferSettings
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
from gpu_tenancy.domain.offers import Kind, Offer, OfferRules, ShapeOption, offers
from gpu_tenancy.domain.planner import PlannerSettings, plan

NOW, H = 1_800_000_000, 3600
SHAPES = [ShapeOption("a100.x2", "A100", 2), ShapeOption("a100.x1", "A100", 1), ShapeOption("h100.x2", "H100", 2)]
RULES = OfferRules(gpu_memory_gb={"A100": 80, "H100": 80})
HOSTS = [Host("a1", "A100", 2), Host("a2", "A100", 2), Host("h1", "H100", 2)]
# A100 is full now: a1 until +10 h (the first lease), a2 from +6 h (a reservation): a 6-hour gap on a2
HOLDS = [Hold("first", "other", "a1", "A100", 2, NOW - H, NOW + 10 * H),
         Hold("later", "other", "a2", "A100", 2, NOW + 6 * H, NOW + 30 * H)]
QUOTAS = {("p", "A100"): QuotaLimit("p", "A100", 8), ("p", "H100"): QuotaLimit("p", "H100", 8),
          ("other", "A100"): QuotaLimit("other", "A100", 8)}


def ask(**kw) -> LeaseRequest:
    fields = dict(lease_id="ask", project_id="p", gpu_model="A100", gpus_per_vm=2, instances=1, duration=12 * H,
                  earliest_start=NOW, latest_start=None, created_at=NOW, arrival=2 ** 62)
    return LeaseRequest(**{**fields, **kw})


def offered(request: LeaseRequest, holds=HOLDS, hosts=HOSTS, quotas=QUOTAS, waiting=(), rules=RULES,
            shape=SHAPES[0]) -> list[Offer]:
    return offers(NOW, hosts, holds, quotas, list(waiting), None, PlannerSettings(), request, shape, SHAPES,
                  rules).offers


def test_a_full_a100_model_offers_h100_now_a_6_hour_a100_now_and_a100_at_the_end_of_the_first_lease():
    got = offered(ask())
    assert [(o.kind, o.gpu_model, o.duration, o.start, o.reserve) for o in got] == [
        (Kind.GPU_MODEL, "H100", 12 * H, NOW, False),
        (Kind.SHORTER, "A100", 6 * H, NOW, False),
        (Kind.LATER, "A100", 12 * H, NOW + 10 * H, True)]
    assert got[0].shape == "h100.x2" and not any(o.borrowing for o in got)
    assert got[1].words(NOW, ask()) == "A100 for 6 h instead of 12 h, now"


def test_each_offer_starts_where_the_whole_plan_puts_that_lease():
    for o in offered(ask()):
        taken = ask(lease_id="taken", gpu_model=o.gpu_model, gpus_per_vm=o.gpus_per_vm, instances=o.instances,
                    duration=o.duration, earliest_start=o.start if o.reserve else NOW)
        placed = plan(NOW, HOSTS, HOLDS, QUOTAS, [taken]).leases["taken"].placement
        assert placed is not None and placed.start == o.start


def test_a_lease_that_starts_as_asked_has_no_offers():
    assert offered(ask(duration=5 * H)) == []


def test_models_without_enough_memory_or_not_listed_are_not_offered():
    assert [o.kind for o in offered(ask(), rules=OfferRules(gpu_memory_gb={"A100": 80, "H100": 40}))] == [
        Kind.SHORTER, Kind.LATER]
    assert [o.kind for o in offered(ask(), rules=OfferRules())] == [Kind.SHORTER, Kind.LATER]


def test_fewer_gpus_when_one_gpu_runs_sooner():
    holds = [Hold("first", "other", "a1", "A100", 1, NOW - H, NOW + 20 * H), *HOLDS[1:]]
    got = offered(ask(), holds=holds, rules=OfferRules())
    fewer = [o for o in got if o.kind is Kind.FEWER_GPUS]
    assert [(o.shape, o.instances, o.start) for o in fewer] == [("a100.x1", 1, NOW)]


def test_fewer_vms_of_a_gang():
    got = offered(ask(gpus_per_vm=1, instances=3, duration=40 * H), shape=SHAPES[1], rules=OfferRules())
    fewer = [o for o in got if o.kind is Kind.FEWER_INSTANCES]
    assert [(o.instances, o.start) for o in fewer] == [(2, NOW + 10 * H)]


def test_now_by_borrowing_when_the_ask_starts_later_and_quota_lets_it_borrow():
    quotas = {**QUOTAS, ("p", "A100"): QuotaLimit("p", "A100", 1, borrow_gpus=2)}
    # within its quota of 1 GPU the 2-GPU lease never fits: it can only borrow, and only now
    got = offered(ask(earliest_start=NOW + H, duration=4 * H), holds=[], quotas=quotas, rules=OfferRules())
    assert [(o.kind, o.start, o.borrowing) for o in got] == [(Kind.BORROW, NOW, True),
                                                            (Kind.FEWER_GPUS, NOW + H, False)]


def test_at_most_five_offers_and_the_reserved_start_last():
    rules = OfferRules(gpu_memory_gb={"A100": 80, "H100": 80}, most=2)
    got = offered(ask(), rules=rules)
    assert [o.kind for o in got] == [Kind.GPU_MODEL, Kind.LATER]


def test_the_offer_settings_are_checked_and_the_key_is_shared_by_every_process_given_one():
    for bad in ({"gpu_memory_gb": {"A100": "80"}}, {"gpu_memory_gb": ["A100"]}, {"offer_valid_seconds": 5},
                {"offer_secret": "short"}):
        with pytest.raises(ValueError):
            Config.load(**bad)
    fernet = Fernet.generate_key().decode()
    assert (OfferSettings.from_config(Config.load(dashboard_token_keys=[fernet])).key
            == OfferSettings.from_config(Config.load(dashboard_token_keys=[fernet])).key)
    assert OfferSettings.from_config(Config.load(offer_secret="s" * 16)).key == b"s" * 16
    assert OfferSettings.from_config(Config.load()).key != OfferSettings.from_config(Config.load()).key
    rules = OfferSettings.from_config(Config.load(gpu_memory_gb={"A100": 80})).rules
    assert rules.gpu_memory_gb == {"A100": 80}

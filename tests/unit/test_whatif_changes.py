"""The what-if's proposed changes (whatif/changes.py) and its history file (whatif/history.py):
each change does what its key says and only that; a change that cannot apply names its key;
a history survives its JSON form."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from gpu_tenancy.domain.model import Host, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.whatif import changes as ch
from gpu_tenancy.whatif.compare import what_if
from gpu_tenancy.whatif.history import History, Lease, from_json, to_json
from gpu_tenancy.whatif.replay import replay

H = 3600

QUOTAS = {("lab.a", "A100"): QuotaLimit("lab.a", "A100", 16, 0, None, 1.0),
          ("lab.a", "H100"): QuotaLimit("lab.a", "H100", 4, 2, 86400, 1.0),
          ("b", "A100"): QuotaLimit("b", "A100", 8, 8, None, 1.0)}
LEASES = (Lease("x1", "lab.a", 100, 3600, 2, 1, asked=7200, gpu_model="A100", priority=10,
                priority_class="high", seq=1),
          Lease("x2", "b", 200, 600, 8, 2, gpu_model="A100", earliest_start=900, seq=2))
HISTORY = History(0, 86400, (Host("h1", "A100", 8), Host("h2", "H100", 4, enabled=False)), QUOTAS, LEASES,
                  {"high": 10, "low": -10}, {"x1": 150})


def apply(*items: str) -> tuple[History, PlannerSettings]:
    return ch.apply(HISTORY, PlannerSettings(), ch.parse(items))


def test_each_change_sets_what_its_key_names_and_nothing_else():
    h, s = apply("quota.lab.a.A100.gpus=24", "quota.b.A100.borrow_gpus=0", "quota.lab.a.H100.max_duration=PT2H",
                 "weight.b=3", "quota.new.H100.gpus=2")
    assert h.quotas[("lab.a", "A100")] == QuotaLimit("lab.a", "A100", 24, 0, None, 1.0)   # a dotted project id
    assert h.quotas[("b", "A100")] == QuotaLimit("b", "A100", 8, 0, None, 3.0)
    assert h.quotas[("lab.a", "H100")].max_duration == 7200
    assert h.quotas[("new", "H100")] == QuotaLimit("new", "H100", 2)
    assert s == PlannerSettings() and h.leases == LEASES
    h, s = apply("planner.wait_bound=none", "planner.wait_bound_gpu_hours=16", "planner.fairshare_half_life=P1D",
                 "planner.wait_bound_leases=2")
    assert (s.wait_bound, s.wait_bound_gpu_hours, s.fairshare_half_life, s.wait_bound_leases) == (None, 16.0, 86400, 2)
    assert h.quotas == QUOTAS


def test_age_x_size_and_the_queued_charge_are_settings_a_what_if_changes():
    _, s = apply("planner.age_size_gpu_hours=16", "planner.queued_charge=4", "planner.queued_charge_spares_gpus=8")
    assert (s.age_size_gpu_hours, s.queued_charge, s.queued_charge_spares_gpus) == (16.0, 4.0, 8)
    assert s == PlannerSettings(age_size_gpu_hours=16, queued_charge=4, queued_charge_spares_gpus=8)
    # the config's bounds, both ends taken
    _, s = apply("planner.age_size_gpu_hours=0.001", "planner.queued_charge=1000", "planner.queued_charge_spares_gpus=1")
    assert (s.age_size_gpu_hours, s.queued_charge, s.queued_charge_spares_gpus) == (0.001, 1000.0, 1)
    _, s = apply("planner.queued_charge_spares_gpus=64", "planner.queued_charge=1e-9")
    assert (s.queued_charge, s.queued_charge_spares_gpus) == (1e-9, 64)
    # and turned off again
    on = PlannerSettings(age_size_gpu_hours=8, queued_charge=4, queued_charge_spares_gpus=8)
    _, s = ch.apply(HISTORY, on, ch.parse(["planner.age_size_gpu_hours=none", "planner.queued_charge=off",
                                           "planner.queued_charge_spares_gpus=null"]))
    assert s == PlannerSettings()


@pytest.mark.parametrize("item, words", [
    ("planner.queued_charge=0", r"planner.queued_charge: 0 is out of range \(more than 0 and at most 1000, or none\)"),
    ("planner.queued_charge=-1", "more than 0 and at most 1000"),
    ("planner.queued_charge=1000.5", "more than 0 and at most 1000"),
    ("planner.queued_charge=inf", "out of range"), ("planner.queued_charge=nan", "out of range"),
    ("planner.queued_charge=lots", "planner.queued_charge: 'lots' is not a number"),
    ("planner.queued_charge_spares_gpus=0", r"planner.queued_charge_spares_gpus: 0 is out of range \(at least 1 and at "
                                            r"most 64, or none\)"),
    ("planner.queued_charge_spares_gpus=65", "at least 1 and at most 64"),
    ("planner.queued_charge_spares_gpus=8.5", "planner.queued_charge_spares_gpus: '8.5' is not an integer"),
    ("planner.age_size_gpu_hours=0", r"planner.age_size_gpu_hours: 0 is out of range \(more than 0, or none\)"),
    ("planner.age_size_gpu_hours=-4", "more than 0"), ("planner.age_size_gpu_hours=inf", "out of range"),
    ("planner.age_size_gpu_hours=x", "not a number"),
])
def test_age_x_size_and_the_queued_charge_are_refused_out_of_the_configs_bounds(item, words):
    with pytest.raises(ch.BadChange, match=words):
        apply(item)


def _flood() -> History:
    """Two 8-GPU hosts. The heavy tenant fills both for 10 h; at 11 h the light tenant asks for
    100 leases of 1 GPU for 4 h; at 12 h the heavy tenant asks for a whole host for 2 h."""
    leases = [Lease(f"h{i}", "heavy", 0, 10 * H, 8, 1, gpu_model="A100", seq=i) for i in range(2)]
    leases.append(Lease("big", "heavy", 12 * H, 2 * H, 8, 1, gpu_model="A100", seq=2))
    leases += [Lease(f"s{i}", "light", 11 * H + i, 4 * H, 1, 1, gpu_model="A100", seq=3 + i) for i in range(100)]
    quotas = {(p, "A100"): QuotaLimit(p, "A100", 16) for p in ("heavy", "light")}
    return History(0, 3 * 86400, (Host("g1", "A100", 8), Host("g2", "A100", 8)), quotas,
                   tuple(sorted(leases, key=lambda x: (x.arrival, x.seq))))


def test_a_what_if_with_the_queued_charge_on_plans_the_flood_differently():
    """Fair share alone keeps the heavy tenant's big lease behind the light tenant's flood for
    more than 10 h; the same history with the queued charge proposed starts it within 3 h."""
    history = _flood()
    before = replay(history, PlannerSettings())
    after = replay(*ch.apply(history, PlannerSettings(), ch.parse(["planner.queued_charge=4"])))
    assert before.start["big"] - 12 * H > 10 * H
    assert after.start["big"] - 12 * H <= 3 * H + 60
    answer = what_if(history, PlannerSettings(), ch.parse(["planner.queued_charge=4"]))
    assert answer["changes"] == ["planner.queued_charge=4"] and answer["current"] != answer["proposed"]


def test_a_priority_class_change_moves_its_leases_only():
    h, _ = apply("priority_class.high.priority=50")
    assert [x.priority for x in h.leases] == [50, 0]
    h, _ = apply("priority_class.low.priority=50")
    assert h.leases == LEASES


@pytest.mark.parametrize("item, words", [
    ("weight.nobody=2", "nobody has no quota"), ("weight.b=0", "out of range"), ("weight.b=x", "not a number"),
    ("quota.b.A100.gpus=1.5", "not an integer"), ("quota.b.A100.colour=1", "not a setting"),
    ("priority_class.none.priority=1", "no priority class none"), ("priority_class.high.priority=101", "-100 to 100"),
    ("planner.fairshare_half_life=none", "not a duration"), ("planner.wait_bound=P1M", "months"),
    ("planner.speed=2", "not a setting"), ("b=2", "not a setting"), ("weight.b", "not a change"),
])
def test_a_change_that_cannot_apply_names_its_key(item, words):
    with pytest.raises(ch.BadChange, match=words):
        apply(item)


def test_the_history_survives_its_json_form():
    assert from_json(json.loads(json.dumps(to_json(HISTORY)))) == HISTORY
    for bad in ({}, {"format": "other"}, {**to_json(HISTORY), "leases": [{"jid": "x"}]}):
        with pytest.raises(ValueError):
            from_json(bad)


def test_random_changes_touch_only_their_own_quota():
    rng = random.Random(7)
    for _ in range(200):
        project, model = rng.choice(sorted(QUOTAS))
        field, value = rng.choice([("gpus", rng.randint(0, 64)), ("borrow_gpus", rng.randint(0, 64)),
                                   ("weight", rng.choice([0.5, 2.0, 7.25]))])
        h, _ = apply(f"quota.{project}.{model}.{field}={value}")
        for key, q in h.quotas.items():
            assert q == (QUOTAS[key] if key != (project, model) else replace(QUOTAS[key], **{field: value}))

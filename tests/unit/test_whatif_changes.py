"""The what-if's proposed changes (whatif/changes.py) and its history file (whatif/history.py):
each change does what its key says and only that; a change that cannot apply names its key;
a history survives its JSON form."""
from __future__ import annotations

import json
import random

import pytest

from gpu_tenancy.domain.model import Host, QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.whatif import changes as ch
from gpu_tenancy.whatif.history import History, Lease, from_json, to_json

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
            assert q == (QUOTAS[key] if key != (project, model) else QuotaLimit(**{**QUOTAS[key].__dict__, field: value}))

"""domain/gpu_activity.py: the arithmetic of utilisation reports and idle rules, checked
on seeded random cases against what it promises."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.domain import gpu_activity as ga
from gpu_tenancy.domain.gpu_activity import GpuSample, IdleRule


@pytest.mark.parametrize("seed", range(200))
def test_by_hour_covers_the_span_exactly_in_whole_hours(seed):
    rnd = random.Random(seed)
    start = rnd.randrange(0, 10 * ga.HOUR)
    end = start + rnd.choice([0, 1, 59, 3599, 3600, 3601, rnd.randrange(0, 5 * ga.HOUR)])
    pieces = ga.by_hour(start, end)
    assert sum(s for _, s in pieces) == end - start
    at = start
    for hour, seconds in pieces:
        assert hour % ga.HOUR == 0 and hour <= at < hour + ga.HOUR and at + seconds <= hour + ga.HOUR
        assert seconds > 0
        at += seconds


@pytest.mark.parametrize("seed", range(100))
def test_the_credited_seconds_never_pass_the_wall_clock_nor_the_cap(seed):
    """However often or seldom a VM reports, its reports never account for more time than has
    passed since the lease became active, and no report for more than MAX_CREDIT."""
    rnd = random.Random(seed)
    active_since = rnd.randrange(0, 10000)
    now, previous, total = active_since, None, 0
    for _ in range(rnd.randrange(1, 40)):
        now += rnd.choice([30, 45, 60, 61, 200, 3600])
        credit = ga.credited_seconds(previous, now, active_since)
        assert 0 <= credit <= ga.MAX_CREDIT
        total += credit
        previous = now
    assert total <= now - active_since


def test_used_counts_each_gpu_by_its_utilisation():
    assert ga.use_of([GpuSample(100, 1), GpuSample(50, 1), GpuSample(0, 1)], 3600) == (3 * 3600.0, 1.5 * 3600)
    assert ga.use_of([], 60) == (0.0, 0.0)


def test_idle_needs_recent_reports():
    assert ga.idle_seconds(None, None, None, 1000) == 0
    assert ga.idle_seconds(0, 1000, None, 1000) == 1000
    assert ga.idle_seconds(0, 1000, 400, 1000) == 600
    assert ga.idle_seconds(0, 1000, None, 1000 + ga.STALE_AFTER + 1) == 0   # the agent went silent


def test_a_projects_rule_before_its_priority_class_before_the_default():
    default = IdleRule(600)
    by_class = IdleRule(1200, priority_class="batch")
    by_project = IdleRule(1800, project_id="p")
    rules = (default, by_class, by_project)
    assert ga.rule_for(rules, "p", "batch") is by_project
    assert ga.rule_for(rules, "q", "batch") is by_class
    assert ga.rule_for(rules, "q", None) is default
    assert ga.rule_for((by_class,), "q", "other") is None


def walk(seed: int) -> bool:
    """Walk a random idle history through idle_step as the engine does, checking each end;
    returns whether the lease was ended."""
    rnd = random.Random(seed)
    warn_after = rnd.choice([60, 600, 1800])
    rule = IdleRule(warn_after, "end", warn_after + rnd.choice([60, 600, 3600]))
    now, first, busy, warned = 0, 0, None, None
    for _ in range(200):
        now += rnd.choice([60, 60, 60, 300, 900])
        if rnd.random() < 0.05:
            busy = now
        since = ga.idle_since(first, busy)
        step = ga.idle_step(rule, now - since, since, warned, now)
        if step == "warn":
            warned = now
        elif step == "end":
            assert warned is not None and warned >= since
            assert now - warned >= rule.then_after - rule.warn_after
            assert now - since >= rule.then_after
            return True
    return False


@pytest.mark.parametrize("seed", range(200))
def test_no_lease_is_ended_without_a_warning_at_least_the_notice_before(seed):
    """Every end comes after a warning given in the same idle spell, at least then_after -
    warn_after before, and after then_after idle."""
    walk(seed)


def test_the_walks_do_end_leases():
    assert sum(walk(seed) for seed in range(200)) > 100


@pytest.mark.parametrize("rules, words", [
    ([{"warn_after_minutes": 0}], "at least 1"),
    ([{"warn_after_minutes": 30, "then": "end"}], "then_after_minutes is given exactly"),
    ([{"warn_after_minutes": 30, "then": "end", "then_after_minutes": 20}], "more than warn_after_minutes"),
    ([{"warn_after_minutes": 30, "then": "pause", "then_after_minutes": 60}], "then must be one of"),
    ([{"warn_after_minutes": 30, "project_id": "p", "priority_class": "c"}], "not both"),
    ([{"warn_after_minutes": 30, "idle": True}], "a rule is a mapping"),
    ([{"warn_after_minutes": "30"}], "whole numbers"),
    ([{"warn_after_minutes": 30}, {"warn_after_minutes": 40}], "a second rule"),
    ({"warn_after_minutes": 30}, "a list"),
])
def test_a_wrong_rule_stops_the_service_at_start_naming_it(db_url, rules, words):
    with pytest.raises(ValueError, match=words):
        Config.load(database_url=db_url, idle_rules=rules)


def test_rules_are_read_in_minutes():
    config = Config.load(idle_rules=[{"priority_class": "batch", "warn_after_minutes": 30, "then": "end",
                                      "then_after_minutes": 90}])
    assert config.idle_rule_set == (IdleRule(1800, "end", 5400, priority_class="batch"),)

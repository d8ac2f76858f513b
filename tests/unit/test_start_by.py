"""The start-by (domain/start_by.py): an ETA plus the planned wait times a quantile of the
project's recent lateness ratios. Hand-made cases, then a seeded world whose lateness is drawn
per project: the share of leases that start by their start-by is the quantile asked for."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.start_by import (FLOOR, FROM_EVERYONE, FROM_LOAD_CLASS, FROM_PROJECT, LOAD_QUANTILE,
                                        MIN_OWN, TOP_CLASS, LoadTimeline, MarginBasis, StartBy, basis_words,
                                        held_range, lateness_ratio, ratio_words, load_class, load_classes, margin,
                                        margin_basis, quantile, told_start_bys, with_load)

H = 3600


def test_quantile_is_the_nearest_rank_at_or_above():
    xs = [x / 10 for x in range(1, 11)]   # 0.1 .. 1.0
    assert quantile(xs, 0.95) == 1.0
    assert quantile(xs, 0.9) == 0.9
    assert quantile(xs, 0.5) == 0.5
    assert quantile(xs, 0.01) == 0.1
    assert quantile([], 0.95) == 0.0


def test_lateness_ratio_is_lateness_over_the_planned_wait():
    assert lateness_ratio(0, 2 * H, 3 * H) == 0.5            # 1 h late on a 2 h wait
    assert lateness_ratio(0, 2 * H, H) == 0.0                # early is not late
    assert lateness_ratio(0, 10, 10 + FLOOR) == 1.0          # a short wait counts as FLOOR


def test_no_history_tells_the_eta():
    m = StartBy()
    assert m.tell("p", "a", 0, 5 * H) == 5 * H


def started_late(m: StartBy, project: str, n: int, ratio: float, t0: int = 0, wait: int = H) -> int:
    """n leases of `project`, each told a `wait` ETA at t0 + i and started `ratio` x wait late."""
    for i in range(n):
        lid = f"{project}-{t0}-{i}"
        m.tell(project, lid, t0 + i, t0 + i + wait)
        m.started(lid, t0 + i + wait + int(ratio * wait))
    return t0 + n


def test_a_project_late_by_half_its_waits_is_told_half_again():
    m = StartBy(min_own=5)
    t = started_late(m, "p", 20, 0.5)
    assert m.tell("p", "new", t, t + 4 * H) == t + 4 * H + 2 * H
    # another project with no leases of its own takes everyone's (only p's so far)
    assert m.tell("q", "new-q", t, t + 2 * H) == t + 2 * H + H


def test_its_own_leases_once_it_has_enough():
    m = StartBy(min_own=5)
    t = started_late(m, "late", 20, 1.0)
    t = started_late(m, "punctual", 5, 0.0, t0=t)
    assert m.tell("punctual", "x", t, t + H) == t + H          # its own five: never late
    m2 = StartBy(min_own=6)
    t = started_late(m2, "late", 20, 1.0)
    t = started_late(m2, "punctual", 5, 0.0, t0=t)
    assert m2.tell("punctual", "x", t, t + H) == t + 2 * H      # five are too few: everyone's


def test_leases_still_waiting_past_their_eta_count_at_how_late_they_are():
    m = StartBy(min_own=1)
    t = started_late(m, "p", 3, 0.0)
    for i in range(10):                                       # told 1 h, still waiting 3 h later
        m.tell("p", f"w{i}", t, t + H)
    now = t + 3 * H
    assert m.margin_ratio("p", now) == 2.0                    # 2 h late on a 1 h wait
    assert m.tell("p", "new", now, now + H) == now + H + 2 * H
    for i in range(10):                                       # they start: the sample is theirs now
        m.started(f"w{i}", now)
    assert m.margin_ratio("p", now) == 2.0
    assert [lease for _eta, lease, _at in m.waiting["p"]] == ["new"]   # started ones leave the waiting


def test_only_the_leases_last_past_their_eta_count_as_overdue():
    m = StartBy(window=3, min_own=1)
    for i in range(5):                                        # ETAs at 1..5 h, each told an hour before
        m.tell("p", f"w{i}", i * H, (i + 1) * H)
    # at 5 h: four are past their ETA (1..4 h late, each on a 1 h wait); the window keeps the
    # three whose ETAs passed last (1, 2, 3 h late): their 95th percentile is 3
    assert m.margin_ratio("p", 5 * H) == 3.0


def test_a_lease_forgotten_or_told_again_leaves_no_trace():
    m = StartBy(min_own=1)
    m.tell("p", "gone", 0, H)
    assert m.margin_ratio("p", 100 * H) == 99.0               # past its ETA: ever later
    assert m.forget("gone") == ("p", 0, H) and m.forget("gone") is None
    assert m.margin_ratio("p", 100 * H) == 0.0 and m.waiting == {"p": []}
    m.tell("p", "again", 0, H)
    m.tell("p", "again", 2 * H, 3 * H)                        # a new ETA replaces the old
    assert m.waiting == {"p": [(3 * H, "again", 2 * H)]}
    m.started("again", 3 * H)
    assert m.waiting == {"p": []} and list(m.own["p"]) == [0.0]


def test_an_eta_before_the_tell_counts_from_the_tell():
    m = StartBy(min_own=1)
    assert m.tell("p", "a", 1000, 0) == 1000                  # told "now" (no margin known)
    m.started("a", 1000 + 30)
    assert list(m.own["p"]) == [30 / FLOOR]                   # 30 s late on a wait of FLOOR


def test_a_lease_that_did_not_wait_is_not_a_sample():
    m = StartBy(min_own=1)
    m.tell("p", "a", 0, 0)
    m.started("a", 0)
    assert m.own == {} and not m.everyone and m.waiting == {"p": []}
    m.started("never-told", 5)                                # nothing to learn, no error
    assert m.told == {}


def test_bad_settings_are_refused():
    for kw in ({"q": 0.0}, {"q": 1.5}, {"window": 0}, {"min_own": -1}):
        with pytest.raises(ValueError):
            StartBy(**kw)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("q", [0.9, 0.95])
def test_in_a_steady_world_the_share_kept_is_the_quantile(seed, q):
    """Each project's leases are late by a ratio drawn from its own distribution (most on time,
    some a little late, a few very late; projects differ by scale), told and started in time
    order: about q of them start by their start-by, not all (a margin that kept every lease
    would tell nothing), and the margins follow each project's scale."""
    rng = random.Random(seed)
    scale = {"light": 0.1, "mid": 0.6, "heavy": 2.5}
    m = StartBy(q=q)
    events = []
    for i in range(6000):
        project = rng.choice(list(scale))
        told_at = i * 60
        wait = int(rng.uniform(0.2, 6) * H)
        late = 0.0 if rng.random() < 0.6 else rng.expovariate(1 / scale[project])
        events.append((told_at, 1, f"l{i}", project, told_at + wait))
        events.append((told_at + wait + int(late * wait), 0, f"l{i}", project, told_at + wait))
    events.sort(key=lambda e: e[:3])
    by, start, margin = {}, {}, {p: [] for p in scale}
    for t, kind, lid, project, eta in events:
        if kind:
            by[lid] = m.tell(project, lid, t, eta)
            margin[project].append((by[lid] - eta) / (eta - t))
        else:
            m.started(lid, t)
            start[lid] = t
    scored = list(by)[1000:]                                  # after the first samples came in
    kept = sum(start[lid] <= by[lid] for lid in scored) / len(scored)
    assert q - 0.03 <= kept <= q + 0.03
    typical = {p: sorted(ms)[len(ms) // 2] for p, ms in margin.items()}
    assert typical["light"] < typical["mid"] < typical["heavy"]


def test_told_start_bys_feeds_the_model_in_time_order_and_a_lease_not_started_stays_waiting():
    """Each lease told from what had happened by its tell: the 40 leases of p that started 1 h
    late on a 1 h wait make the 41st's margin its wait; leases told but never started count as
    overdue once past their ETA (so q's later lease is told a margin), not before."""
    told = [("p", f"p{k}", k * 10 * H, k * 10 * H + H, k * 10 * H + 2 * H) for k in range(40)]
    told.append(("p", "p-next", 400 * H + 1, 401 * H + 1, None))
    told += [("q", f"q-stuck{k}", 0, H, None) for k in range(2)] + [("q", f"q{k}", 0, H, H) for k in range(28)]
    told.append(("q", "q-next", 2 * H, 3 * H, None))
    by = told_start_bys(told)
    assert by["p0"] == H and by["p-next"] == 401 * H + 1 + H   # ratio 1: 1 h more on a 1 h wait
    # q: 28 on time and two stuck, 1 h past their ETA on a 1 h wait (ratio 1) when q-next is told:
    # the 95th percentile of 30 is the 29th
    assert by["q-next"] == 3 * H + H
    # the same with the stuck ones not yet past their ETA at q-next's tell: no margin
    later = [(p, lease, t, eta + 2 * H if "stuck" in lease else eta, s) for p, lease, t, eta, s in told]
    assert told_start_bys(later)["q-next"] == 3 * H


def test_a_load_class_is_one_per_doubling_above_a_quarter_of_the_fair_part():
    fair = 16.0
    assert [load_class(g, fair) for g in (0, 3, 4, 7, 8, 15, 16, 31, 32)] == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    assert load_class(10 ** 6, fair) == TOP_CLASS and load_class(0, 0.0) == 0 and load_class(1, 0.0) == TOP_CLASS


def test_load_classes_take_the_weights_share_of_each_model_and_the_highest_over_models():
    weights = {("a", "A100"): 1.0, ("b", "A100"): 3.0, ("a", "H100"): 1.0, ("c", "H100"): 1.0}
    capacity = {"A100": 32.0, "H100": 8.0}
    # a's fair parts: 8 A100 (a quarter: 2), 4 H100 (a quarter: 1); b's: 24 A100
    held = {("a", "A100"): 2.0, ("a", "H100"): 4.0, ("b", "A100"): 24.0, ("d", "A100"): 1.0}
    assert load_classes(held, weights, capacity) == {"a": 3, "b": 3, "c": 0, "d": TOP_CLASS}


def test_a_load_timeline_is_the_classes_of_what_was_held_just_before_each_instant():
    weights = {("a", "A100"): 1.0, ("b", "A100"): 1.0, ("a", "H100"): 1.0}
    loads = LoadTimeline([("a", "A100", 4, 100, 300), ("a", "A100", 4, 200, 400), ("a", "H100", 8, 350, 500)],
                         weights, {"A100": 32.0, "H100": 8.0})
    # a's fair parts: 16 A100 (a quarter: 4), 8 H100 (a quarter: 2); its highest class counts
    assert [loads.at("a", t) for t in (100, 101, 201, 301, 351, 401, 501)] == [0, 1, 2, 1, 3, 3, 0]
    assert loads.at("b", 250) == 0


def test_with_load_raises_a_margin_to_its_classes_from_enough_samples_on():
    sample = [k / 10 for k in range(100)]
    assert with_load(0.0, sample) == quantile(sample, LOAD_QUANTILE) == 8.9
    assert with_load(9.9, sample) == 9.9                     # never lowers the project's own
    assert with_load(0.0, sample[:29]) == 0.0                # too few to say


@pytest.mark.parametrize("seed", range(4))
def test_a_project_whose_load_turns_is_told_its_new_classes_margin(seed):
    """Leases are late by how far their project is over its fair part when told (a heavy
    project is overtaken), not by whose they are. "steady" stays heavy and teaches class 3 its
    lateness; "turning" is light for its first 400 leases (on time), then bursts (class 3): its
    own history tells its burst no margin, its class does."""
    rng = random.Random(seed)
    events = []
    for i in range(2000):
        project = "steady" if i % 2 == 0 else "turning"
        load = 3 if project == "steady" or i >= 800 else 0
        told_at, wait = i * 60, int(rng.uniform(0.5, 4) * H)
        late = rng.uniform(0.2, 1.5) if load else 0.0
        events.append((told_at, 1, f"l{i}", project, told_at + wait, load))
        events.append((told_at + wait + int(late * wait), 0, f"l{i}", project, told_at + wait, load))
    events.sort(key=lambda e: e[:3])

    def kept_by_the_burst(with_classes: bool) -> float:
        m, by, start = StartBy(), {}, {}
        for t, kind, lid, project, eta, load in events:
            if kind:
                by[lid] = m.tell(project, lid, t, eta, load if with_classes else None)
            else:
                m.started(lid, t, load if with_classes else None)
                start[lid] = t
        burst = [f"l{i}" for i in range(801, 1000, 2)]   # the turning project's first 100 heavy leases
        return sum(start[lid] <= by[lid] for lid in burst) / len(burst)
    assert kept_by_the_burst(True) >= 0.9
    assert kept_by_the_burst(False) <= 0.5


def test_a_margins_basis_says_whose_leases_it_was_learnt_from():
    """Its own from MIN_OWN samples (overdue ones count), everyone's below; its load class's only
    where the class asks more than that, from MIN_OWN of the class's samples on."""
    own, everyone = [0.1] * MIN_OWN, [0.2] * 50
    assert margin_basis(own, (), everyone) == MarginBasis(0.1, FROM_PROJECT, MIN_OWN)
    assert margin_basis(own[:-2], [3.0, 3.0], everyone, load=2) == MarginBasis(3.0, FROM_PROJECT, MIN_OWN, 2)
    assert margin_basis(own[:-1], (), everyone, load=0) == MarginBasis(0.2, FROM_EVERYONE, 50, 0)
    high, low = [5.0] * MIN_OWN, [0.05] * 100
    assert margin_basis(own, (), everyone, high, 4) == MarginBasis(5.0, FROM_LOAD_CLASS, MIN_OWN, 4)
    assert margin_basis(own, (), everyone, high[:-1], 4) == MarginBasis(0.1, FROM_PROJECT, MIN_OWN, 4)
    assert margin_basis(own, (), everyone, low, 4) == MarginBasis(0.1, FROM_PROJECT, MIN_OWN, 4)
    assert margin_basis(own, (), everyone, high) == MarginBasis(0.1, FROM_PROJECT, MIN_OWN)   # no class: not raised
    # the ratio is the one margin() and with_load() give, whatever the sample
    rng = random.Random(7)
    for _ in range(500):
        xs, ys, zs, cs = ([rng.random() * 4 for _ in range(rng.randint(0, 60))] for _ in range(4))
        load = rng.choice([None, 0, 3])
        expected = margin(xs, ys, zs)
        expected = expected if load is None else with_load(expected, cs)
        b = margin_basis(xs, ys, zs, cs, load)
        assert b.ratio == expected and b.quantile == (LOAD_QUANTILE if b.source == FROM_LOAD_CLASS else 0.95)


@pytest.mark.parametrize("load", range(TOP_CLASS + 1))
def test_a_load_classes_range_is_what_its_projects_hold_over_their_fair_part(load):
    low, high = held_range(load)
    fair = 64.0
    assert load_class(low * fair, fair) == load or (load == 0 and low == 0)
    if high is not None:
        assert load_class(high * fair - 0.01, fair) == load and load_class(high * fair, fair) == load + 1
    else:
        assert load == TOP_CLASS and load_class(1000 * fair, fair) == TOP_CLASS


def test_a_margins_basis_in_words():
    assert basis_words(MarginBasis(1.53, FROM_PROJECT, 100)) == (
        "the margin is learnt from this project's last 100 leases that waited, 95 % of which started no later "
        "than their ETA plus 1.5 times the wait they were told")
    assert basis_words(MarginBasis(0.0, FROM_PROJECT, 40)) == (
        "the margin is learnt from this project's last 40 leases that waited, 95 % of which started by their ETA")
    assert basis_words(MarginBasis(0.4, FROM_EVERYONE, 12)) == (
        "this project has too few leases that waited, so the margin is learnt from everyone's last 12, 95 % of "
        "which started no later than their ETA plus 0.4 times the wait they were told")
    assert basis_words(MarginBasis(5.3, FROM_LOAD_CLASS, 400, 4)) == (
        "this project held 2 to 4 times its fair share of the GPUs (load class 4) when the margin was computed, "
        "and leases at that load started later: the margin is learnt from the last 400 leases that waited at "
        "that load, 90 % of which started no later than their ETA plus 5.3 times the wait they were told")
    assert "less than 0.25 of its fair share" in basis_words(MarginBasis(1.0, FROM_LOAD_CLASS, 40, 0))
    assert "at least 32 times its fair share" in basis_words(MarginBasis(1.0, FROM_LOAD_CLASS, 40, TOP_CLASS))
    assert basis_words(MarginBasis(0.0, FROM_EVERYONE, 0)).endswith("the start-by is the ETA")


@pytest.mark.parametrize("ratio, words", [(0.013, "0.013"), (0.4, "0.4"), (0.999, "1"), (1.0, "1"), (1.53, "1.5"),
                                          (14.7, "14.7"), (120.0, "120"), (120.44, "120.4"), (2500.0, "2500")])
def test_a_ratio_reads_without_an_exponent(ratio, words):
    assert ratio_words(ratio) == words

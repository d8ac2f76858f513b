"""The compiled scan index (domain/scan_index.c) answers every capacity question as the
Python index (ModelIndex) does, and keeps the same profiles: seeded random clusters, holds
and thousands of questions, each answer reserved (as a plan does) before the next.
Whole plans with one index and the other are compared in tests/unit/test_planner_oracle.py's
backends too.

Without the compiled module (installed with no C compiler) these are skipped, except in CI,
which builds it: there a missing module fails."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.capacity import ModelIndex
from gpu_tenancy.domain.model import Host
from gpu_tenancy.domain.profile import INF
from gpu_tenancy.domain.scan_index import ScanIndex
from tests.scan_index_built import require_scan_index


@pytest.fixture(autouse=True)
def built():
    require_scan_index()


NOW = 1_800_000_000


def cluster(rng: random.Random):
    n = rng.choice([1, 2, 3, 5, 8, 13, 30])
    hosts = [Host(f"h{i:03d}", "A100", rng.choice([1, 2, 4, 8, 8, 8]), aggregate=rng.choice([None, "a", "b", "c"]))
             for i in range(n)]
    rng.shuffle(hosts)   # the index orders them by name itself
    spans: dict[str, list[tuple[int, int, int]]] = {}
    grid = rng.choice([1, 1800])   # on a grid, holds meet end to start and cancel out (equal neighbours)
    for h in hosts:
        for _ in range(rng.randint(0, 6)):
            start = NOW + rng.randint(-86400, 86400) // grid * grid
            end = INF if rng.random() < 0.05 else start + max(1, rng.randint(1, 3 * 86400) // grid * grid)
            # some hosts over-committed (a hold the cloud placed beyond the plan's view)
            spans.setdefault(h.name, []).append((start, end, -rng.randint(1, h.gpus + (rng.random() < 0.1))))
    return hosts, spans


def ask(rng: random.Random, origin: int):
    t = origin if rng.random() < 0.6 else origin + rng.randint(-3600, 3 * 86400)
    d = rng.choice([1, 60, 600, 3600, 7200, 86400, 5 * 86400, rng.randint(1, 4 * 86400)])
    g = rng.choice([1, 1, 2, 3, 4, 8, 9])
    n = 1 if rng.random() < 0.8 else rng.randint(2, 6)
    return t, d, g, n


@pytest.mark.parametrize("empty_together", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_the_scan_index_answers_as_the_python_index(seed, empty_together):
    rng = random.Random(seed)
    hosts, spans = cluster(rng)
    ours = ScanIndex("A100", hosts, NOW, spans, empty_together)
    ref = ModelIndex("A100", hosts, NOW, spans, empty_together)
    ref.build()
    ours.build()
    assert list(ours.hosts) == list(ref.hosts)
    for name in ref.hosts:
        assert ours.overcommitted(name) == ref.overcommitted(name)
    for step in range(300):
        t, d, g, n = ask(rng, NOW)
        got, want = ours.earliest(t, d, g, n), ref.earliest(t, d, g, n)
        assert got == want, (seed, step, (t, d, g, n))
        assert ours.fits_at(t, d, g, n) == ref.fits_at(t, d, g, n)
        assert ours.largest_free_now() == ref.largest_free_now()
        if want is not None and rng.random() < 0.7:
            start, chosen = want
            for h in chosen:
                ours.reserve(h, start, start + d, g)
                ref.reserve(h, start, start + d, g)
        if rng.random() < 0.1:   # a reservation nobody asked about: clipped at the origin, or empty
            h = rng.choice(list(ref.hosts))
            a = NOW + rng.randint(-7200, 86400)
            b = a + rng.randint(-60, 86400)
            gp = rng.randint(0, 3)
            ours.reserve(h, a, b, gp)
            ref.reserve(h, a, b, gp)
    for name, hs in ref.hosts.items():
        assert ours.profile(name) == (hs.prof.times, hs.prof.vals), name


@pytest.mark.parametrize("seed", range(40))
def test_start_bounds_kept_across_reservations_answer_as_a_fresh_index(seed):
    """The index keeps, per host, GPU count and duration class, the earliest start from the
    origin (a bound a question skips hosts by). After reservations that take GPUs and some
    that give them back (which can move a bound earlier), every answer is the answer of an
    index built afresh from the same holds, whose bounds are all worked out anew."""
    rng = random.Random(seed)
    hosts, spans = cluster(rng)
    ours = ScanIndex("A100", hosts, NOW, spans)
    taken: dict[str, list[tuple[int, int, int]]] = {h: list(s) for h, s in spans.items()}
    for step in range(120):
        for _ in range(3):   # questions first, so that bounds are worked out before the change
            t, d, g, n = ask(rng, NOW)
            ours.earliest(t, d, g, n)
        h = rng.choice(list(ours.hosts))
        a = NOW + rng.randint(-3600, 2 * 86400) // 600 * 600
        b = a + rng.randint(1, 86400) // 600 * 600
        gp = rng.choice([1, 2, 4, -1, -2, -4])   # given back: as a hold's end would
        ours.reserve(h, a, b, gp)
        taken.setdefault(h, []).append((a, b, -gp))
        fresh = ScanIndex("A100", hosts, NOW, taken)
        assert ours.largest_free_now() == fresh.largest_free_now(), (seed, step)   # kept until the origin changes
        for _ in range(4):
            t, d, g, n = ask(rng, NOW)
            assert ours.earliest(t, d, g, n) == fresh.earliest(t, d, g, n), (seed, step, (t, d, g, n))


def test_a_gang_whose_window_runs_past_forever_is_answered_as_without_bounds():
    """earliest_gang cuts a window at INF, earliest_one does not: a host whose only free run
    starts within a duration class of INF still takes a gang's VMs (found by fuzzing)."""
    from gpu_tenancy.domain._scan_index import Scan
    scan = Scan(0, [(16, [(0, INF - 100, -16)])])
    assert scan.earliest_gang(INF - 50, 600, 8, 2) == (INF - 50, [(16, 0, 2)])
    assert scan.earliest_one(INF - 50, 600, 8) is None


def test_a_question_after_a_failed_build_then_a_build_is_safe():
    from gpu_tenancy.domain._scan_index import Scan
    scan = Scan.__new__(Scan)
    with pytest.raises(ValueError):
        scan.__init__(NOW, [(8, [(NOW, NOW + 1, 1 << 62)])])
    assert scan.earliest_one(NOW, 60, 1) is None   # bounds made for no hosts
    scan.__init__(NOW, [(8, []), (8, [(NOW, NOW + 600, -8)])])
    assert scan.earliest_one(NOW, 60, 8) == (NOW, 0)
    assert scan.earliest_one(NOW + 1, 86400, 8) == (NOW + 1, 0)


def test_an_empty_model_and_asks_beyond_its_hosts():
    ours = ScanIndex("A100", [], NOW)
    assert ours.earliest(NOW, 60, 1) is None
    assert ours.largest_free_now() == 0
    one = ScanIndex("A100", [Host("h1", "A100", 4)], NOW)
    assert one.earliest(NOW, 60, 8) is None            # more GPUs than a host has
    assert one.earliest(NOW, 60, 0) is None
    assert one.earliest(NOW, 60, 2, 3) is None         # a gang the hosts can never take at once
    assert one.earliest(NOW - 99, 60, 2, 2) == (NOW, ("h1", "h1"))   # before the origin: from the origin
    one.reserve("h1", NOW, NOW + 600, 3)
    assert one.earliest(NOW, 10**9, 2) == (NOW + 600, ("h1",))        # long: once free for good
    assert one.largest_free_now() == 1
    with pytest.raises(KeyError):
        one.reserve("h9", NOW, NOW + 1, 1)


@pytest.mark.parametrize("spans", [
    [(NOW + 60, NOW + 120, -2), (NOW + 120, NOW + 180, -2)],         # end to start, equal: one segment
    [(NOW - 60, NOW + 120, -1), (NOW + 120, INF, -1)],                 # from before the origin, on forever
    [(NOW - 60, NOW, -4), (NOW + 5, NOW + 5, -4), (NOW + 9, NOW + 10, 0)],   # ended by the origin; empty
    [(NOW + 30, NOW + 90, -3), (NOW + 30, NOW + 90, 3)],               # cancelled out
])
def test_a_host_profile_is_built_as_step_profile_builds_it(spans):
    from gpu_tenancy.domain.profile import StepProfile
    want = StepProfile.of_spans(NOW, 8, spans)
    assert ScanIndex("A100", [Host("h1", "A100", 8)], NOW, {"h1": spans}).profile("h1") == (want.times, want.vals)


def test_odd_input_is_refused_or_answered_as_the_python_index():
    """What the planner never passes is still safe: values that would overflow C's integers are
    refused, a failed build leaves an index with no hosts, a name given twice is one host."""
    from gpu_tenancy.domain._scan_index import Scan
    with pytest.raises(ValueError):
        Scan(-1, [])                                       # no start before 0: -1 means "none" in C
    with pytest.raises(ValueError):
        Scan(NOW, [(8, [(NOW, NOW + 60, -(1 << 40))])])    # GPU counts whose sums could overflow
    with pytest.raises(TypeError):
        Scan(NOW, [(8, [[NOW, NOW + 60, -1]])])            # a hold given as a list
    half = Scan.__new__(Scan)
    with pytest.raises(ValueError):
        half.__init__(NOW, [(8, []), (8, [(NOW, NOW + 1, 1 << 62)])])
    assert half.largest_free_now() == 0 and half.earliest_one(NOW, 60, 1) is None   # no hosts, no crash
    ours = ScanIndex("A100", [Host("h1", "A100", 8)], NOW)
    with pytest.raises(ValueError):
        ours.earliest(NOW, INF + 1, 1)
    twice = [Host("h1", "A100", 4), Host("h1", "A100", 8)]
    spans = {"h1": [(NOW, NOW + 600, -4)]}
    ref = ModelIndex("A100", twice, NOW, spans)
    ref.build()
    assert ScanIndex("A100", twice, NOW, spans).earliest(NOW, 60, 4, 2) == ref.earliest(NOW, 60, 4, 2)

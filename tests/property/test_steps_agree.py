"""The compiled step function (scan_index.c's Steps, the quota book's profiles where it is
built) holds and answers as StepProfile does: seeded random spans and operations, every
answer and the whole profile compared after each change."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.profile import INF, StepProfile
from gpu_tenancy.domain.quota_book import quota_profile
from tests.scan_index_built import require_scan_index

NOW = 1_800_000_000


@pytest.fixture(autouse=True)
def built():
    require_scan_index()


def moment(rng: random.Random) -> int:
    return NOW + rng.choice([-7200, 0, 0, 1, 600, rng.randint(-86400, 3 * 86400), INF - NOW])


@pytest.mark.parametrize("seed", range(60))
def test_steps_answer_as_step_profile(seed):
    from gpu_tenancy.domain._scan_index import Steps
    rng = random.Random(seed)
    value = rng.choice([0, 1, 8, 64, 2000])
    grid = rng.choice([1, 600])
    spans = []
    for _ in range(rng.randint(0, 12)):
        a = NOW + rng.randint(-86400, 86400) // grid * grid
        b = INF if rng.random() < 0.05 else a + rng.randint(-600, 2 * 86400) // grid * grid
        spans.append((a, b, -rng.randint(-2, value + 2)))
    ours, ref = Steps(NOW, value, spans), StepProfile.of_spans(NOW, value, spans)
    for step in range(200):
        assert ours.steps() == (ref.times, ref.vals), (seed, step)
        t, d, need = moment(rng), rng.choice([0, 1, 60, 3600, 86400, rng.randint(1, 5 * 86400)]), rng.randint(-1, value + 1)
        assert ours.earliest_fit(t, d, need) == ref.earliest_fit(t, d, need), (seed, step, t, d, need)
        a, b = sorted((moment(rng), moment(rng)))
        assert ours.min_on(a, b) == ref.min_on(a, b), (seed, step, a, b)
        assert ours.value_at(t) == ref.value_at(t)
        assert ours.least() == ref.least()
        assert ours.times_between(a, b) == ref.times_between(a, b) == [x for x in ref.times if a < x < b]
        if rng.random() < 0.5:
            a = NOW + rng.randint(-3600, 2 * 86400) // grid * grid
            b = INF if rng.random() < 0.05 else a + rng.randint(-60, 86400) // grid * grid
            delta = rng.randint(-4, 4)
            ours.add(a, b, delta)
            ref.add(a, b, delta)


def test_a_quota_beyond_the_compiled_bounds_is_kept_in_python():
    assert isinstance(quota_profile(NOW, 1 << 21, []), StepProfile)
    assert isinstance(quota_profile(NOW, 8, [(NOW, NOW + 60, -(1 << 21))]), StepProfile)
    assert not isinstance(quota_profile(NOW, 8, [(NOW, NOW + 60, -2)]), StepProfile)


def test_odd_input_to_steps_is_refused():
    from gpu_tenancy.domain._scan_index import Steps
    with pytest.raises(ValueError):
        Steps(-1, 0, [])
    with pytest.raises(TypeError):
        Steps(NOW, 0, [[NOW, NOW + 1, 1]])
    empty = Steps.__new__(Steps)
    with pytest.raises(ValueError):
        empty.least()   # never made: refused, not read
    steps = Steps(NOW, 4, [])
    with pytest.raises(ValueError):
        steps.add(NOW, NOW + 1, 1 << 40)
    with pytest.raises(TypeError):
        steps.__init__(NOW, 4, [])   # made once

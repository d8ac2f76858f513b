"""A profile built at once from spans (StepProfile.of_spans, how the planner makes the
holds' host and quota profiles) is the one add() gives span by span: same segments,
equal neighbours merged, clipped to the origin; and the planner's quota floor, lowered
by each reserve and read again only when it stops covering a lease, answers like the
profile walked every time. Seeded random cases."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.domain.model import Hold, QuotaLimit
from gpu_tenancy.domain.quota_book import QuotaBook
from gpu_tenancy.domain.profile import INF, StepProfile

NOW = 1_800_000_000


def spans(rng: random.Random, k: int) -> list[tuple[int, int, int]]:
    out = []
    for _ in range(k):
        a = NOW + rng.randint(-5, 20) * 300
        b = INF if rng.random() < 0.1 else a + rng.randint(-1, 12) * 300   # some empty or reversed
        out.append((a, b, rng.choice([-4, -2, -1, 0, 1, 2])))
    return out


@pytest.mark.parametrize("seed", range(300))
def test_of_spans_is_add_span_by_span(seed):
    rng = random.Random(seed)
    ss = spans(rng, rng.randint(0, 12))
    value = rng.choice([0, 4, 8])
    one_by_one = StepProfile(NOW, value)
    for a, b, d in ss:
        one_by_one.add(a, b, d)
    at_once = StepProfile.of_spans(NOW, value, ss)
    assert (at_once.times, at_once.vals) == (one_by_one.times, one_by_one.vals)
    assert all(x != y for x, y in zip(at_once.vals, at_once.vals[1:]))   # no equal neighbours


@pytest.mark.parametrize("seed", range(100))
def test_quota_floor_answers_like_walking_the_profile(seed):
    rng = random.Random(seed)
    q = QuotaLimit("p", "A100", rng.choice([4, 8, 16]))
    holds = [Hold(f"h{i}", "p", "n", "A100", rng.randint(1, 4), NOW + rng.randint(-4, 8) * 600,
                  NOW + rng.randint(1, 16) * 600) for i in range(rng.randint(0, 4))]
    book = QuotaBook(NOW, {("p", "A100"): q}, holds)
    for _ in range(30):
        t, d, need = NOW + rng.randint(0, 20) * 300, rng.randint(1, 8) * 600, rng.randint(1, q.gpus)
        want = book._prof("p", "A100").earliest_fit(t, d, need)
        assert book.earliest("p", "A100", t, d, need) == want
        assert book.floor[("p", "A100")] <= book.profs[("p", "A100")].least()
        if want is not None and rng.random() < 0.6:
            book.reserve("p", "A100", want, want + d, need)

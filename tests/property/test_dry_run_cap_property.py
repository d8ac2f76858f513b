"""The dry-run cap (api/dry_runs.py): seeded random request times of several projects, several
in one second or far apart. Per project: never more than `max_dry_runs_per_minute` taken in any
60 s; a dry run refused only when its own project has taken that many in the last 60 s (never
because of another project's), with a 429 in the OpenStack error format whose Retry-After is
the wait until its project's oldest of them is a minute old, and a dry run asked then is taken.
Through the API (each dry run plans the queue: a few hundred), and the counter alone (many
thousands)."""
from __future__ import annotations

import random
from collections import defaultdict

import pytest

from gpu_tenancy.api.dry_runs import WINDOW, DryRunLimit
from gpu_tenancy.config import Config
from gpu_tenancy.errors import TooManyRequests
from tests.conftest import headers

PROJECTS = ("ml-vision", "nlp-lab", "small-lab", "astro")


def gap(rng: random.Random) -> int:
    """Seconds to the next request: often none (several in one second), now and then a minute or more."""
    return rng.choice((0, 0, 0, 1, 1, 2, 5, 13, 29, 59, 60, 61, 90))


class Model:
    """What the cap promises, checked against what was answered."""

    def __init__(self, cap: int, seed: int) -> None:
        self.cap, self.seed = cap, seed
        self.taken: dict[str, list[int]] = defaultdict(list)

    def in_window(self, project: str, now: int) -> list[int]:
        return [t for t in self.taken[project] if now - WINDOW < t <= now]

    def answered(self, step: int, project: str, now: int, retry_after: int | None) -> None:
        """`retry_after`: None when it was taken."""
        recent = self.in_window(project, now)
        where = f"seed {self.seed} cap {self.cap} step {step}: {project} at {now}, its last minute's {recent}"
        if retry_after is None:
            assert len(recent) < self.cap, f"taken past the cap: {where}"
            self.taken[project].append(now)
            return
        assert len(recent) >= self.cap, f"refused under the cap: {where}"
        assert retry_after == max(1, recent[-self.cap] + WINDOW - now), f"Retry-After {retry_after}: {where}"

    def check_windows(self) -> None:
        for project, times in self.taken.items():
            for k, t in enumerate(times):   # every 60 s from a dry run taken
                assert sum(t <= u < t + WINDOW for u in times[k:]) <= self.cap, (self.seed, project, times)


@pytest.mark.parametrize("cap", [1, 2, 5])
@pytest.mark.parametrize("seed", range(5))
def test_the_counter_keeps_each_projects_cap_in_every_minute(cap, seed):
    rng = random.Random(f"{seed}:{cap}")
    limit, model, now = DryRunLimit(cap), Model(cap, seed), 1_800_000_000
    for step in range(2000):
        now += gap(rng)
        project = rng.choice(PROJECTS[: rng.choice((1, 2, 4))])   # often one project alone, often all
        try:
            limit.take(project, now)
            model.answered(step, project, now, None)
        except TooManyRequests as refused:
            model.answered(step, project, now, refused.retry_after)
            if rng.random() < 0.3:   # it waits as told, and is taken then
                now += refused.retry_after
                limit.take(project, now)
                model.answered(step, project, now, None)
    model.check_windows()


CAP = 3


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", max_dry_runs_per_minute=CAP)


@pytest.mark.parametrize("seed", range(3))
def test_the_api_keeps_each_projects_cap_and_says_when_to_ask_again(client, runtime, seed):
    rng = random.Random(seed)
    model = Model(CAP, seed)
    for step in range(80):
        runtime.clock.advance(gap(rng))
        project, now = rng.choice(PROJECTS[:2] * 3 + PROJECTS[3:]), runtime.clock.now()
        reply = client.post("/v1/leases", query_string={"dry_run": "true"}, headers=headers(project),
                            json={"shape": rng.choice(("a100.x1", "a100.x8")), "duration": "PT1H"})
        if reply.status_code == 429:
            (err,) = reply.get_json()["errors"]
            assert err["status"] == 429 and err["code"] == "gpu_tenancy.too_many_dry_runs", err
            assert err["request_id"] == reply.headers["x-openstack-request-id"]
            model.answered(step, project, now, int(reply.headers["Retry-After"]))
        else:   # counted as asked: astro, without a quota, is answered why (a 403) by the plan it runs
            assert reply.status_code == (403 if project == "astro" else 200), reply.get_json()
            model.answered(step, project, now, None)
    model.check_windows()
    assert sum(map(len, model.taken.values())) < 80   # some were refused: the cap was reached

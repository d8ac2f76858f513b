"""/v1/share is made at most once per engine tick and per replan (api/share.py: StandingsCache):
seeded random interleavings of creates (some fitted into the plan, as a long queue's are), cancels,
engine ticks, the clock moved on, and share reads. Every answer is the standings of the ledger as
it stood at the answer's `now` (the last state of that second before the read: what a fresh
making then gives, engine/share.py), its `now` is no older than the last engine tick and less than
a tick before the read."""
from __future__ import annotations

import random

import pytest

from gpu_tenancy.api.share import render_row
from gpu_tenancy.engine import share
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers

PROJECTS = ("ml-vision", "nlp-lab", "small-lab")
SHAPES = ("a100.x1", "a100.x2", "a100.x8", "h100.x1", "h100.x4")
ADMIN = headers("ml-vision", "admin", user="ops")
STEPS = 80


def truth(runtime) -> list[dict]:
    """The standings made afresh now, as an admin reads them."""
    settings = runtime.planner_settings
    with runtime.sessions() as session:
        rows = share.standings(session, runtime.clock.now(), settings)
    return [render_row(row, True, settings.queued_charge is not None) for row in rows]


@pytest.mark.parametrize("seed", range(4))
def test_a_share_answer_is_the_ledger_as_of_its_now(client, runtime, engine_tick, seed):
    rng = random.Random(seed)
    tick = runtime.config.engine_tick_seconds
    runtime.fits.min_waiting = rng.choice((0, 3))   # creates fitted into the plan once a few wait
    leases: list[tuple[str, str]] = []
    said: dict[int, list[dict]] = {}   # second -> the standings as the ledger stood at its last step then
    ticked = runtime.clock.now()
    said[ticked] = truth(runtime)
    for step in range(STEPS):
        action = rng.choices(("create", "cancel", "tick", "wait", "read"), (30, 10, 8, 12, 40))[0]
        if action == "create":
            project = rng.choice(PROJECTS)
            body: dict = {"shape": rng.choice(SHAPES), "duration": rng.choice(("PT1H", "PT4H")),
                          "instances": rng.choice((1, 1, 2))}
            if rng.random() < 0.3:
                body["start"] = rfc3339(runtime.clock.now() + rng.choice((600, 7200)))
            reply = client.post("/v1/leases", headers=headers(project), json=body)
            assert reply.status_code in (201, 403), reply.get_json()
            if reply.status_code == 201:
                leases.append((project, reply.get_json()["lease"]["id"]))
        elif action == "cancel" and leases:
            project, lease_id = leases.pop(rng.randrange(len(leases)))
            assert client.delete(f"/v1/leases/{lease_id}", headers=headers(project)).status_code in (204, 409)
        elif action == "tick":
            engine_tick(advance=rng.choice((0, 1, tick - 1, tick, 3 * tick)))
            ticked = runtime.clock.now()
        elif action == "wait":
            runtime.clock.advance(rng.choice((1, 2, tick - 1, tick)))
        elif action == "read":
            reply = client.get("/v1/share", headers=ADMIN)
            assert reply.status_code == 200, reply.get_json()
            answer = reply.get_json()["share"]
            now = runtime.clock.now()
            made = next(t for t in said if rfc3339(t) == answer["now"])
            where = f"seed {seed} step {step}: read at {now}, made at {made}, last tick at {ticked}"
            assert ticked <= made <= now and now - made < tick, where
            assert answer["projects"] == said[made], where
        said[runtime.clock.now()] = truth(runtime)

"""A seeded random day of requests, cancels, extensions and engine ticks:
at every step no host holds more GPUs than it has, no project more than its
quota allows, and in the end every lease has reached a final state."""
from __future__ import annotations

import random

from sqlalchemy import select

from gpu_tenancy.db import models as m
from tests.conftest import headers
from tests.functional.test_ledger import overcommits, quota_overruns

SHAPES = ["a100.x1", "a100.x2", "a100.x4", "a100.x8", "h100.x1", "h100.x2", "h100.x4"]
PROJECTS = ["ml-vision", "nlp-lab"]


def test_a_random_day_never_overcommits_and_every_lease_finishes(app, runtime, sessions, engine_tick):
    rng = random.Random(20261201)
    client = app.test_client()
    created = []
    for step in range(150):
        action = rng.random()
        project = rng.choice(PROJECTS)
        if action < 0.55:
            body = {"shape": rng.choice(SHAPES), "instances": rng.choice([1, 1, 1, 2]),
                    "duration": rng.choice([600, 1800, 3600, 7200, 4 * 3600])}
            response = client.post("/v1/leases", json=body, headers=headers(project))
            assert response.status_code in (201, 403), response.get_json()   # 403: over the project's quota
            if response.status_code == 201:
                created.append((project, response.get_json()["lease"]["id"]))
        elif action < 0.65 and created:
            project, lease_id = rng.choice(created)
            response = client.delete(f"/v1/leases/{lease_id}", headers=headers(project))
            assert response.status_code in (204, 409)
        elif action < 0.75 and created:
            project, lease_id = rng.choice(created)
            response = client.patch(f"/v1/leases/{lease_id}", json={"duration": rng.choice([1800, 3 * 3600]), "shrink": True},
                                    headers=headers(project))
            assert response.status_code in (200, 400, 409), response.get_json()
        else:
            engine_tick(advance=rng.choice([5, 30, 300, 900]))
        assert overcommits(sessions) == [], step
        assert quota_overruns(sessions) == [], step
    for _ in range(80):          # let the day run out
        engine_tick(advance=900)
    with sessions() as s:
        statuses = {lease_id: s.get(m.Lease, lease_id).status for _, lease_id in created}
        events = s.scalars(select(m.Event.to_state).where(m.Event.kind == "transition")).all()
    assert len(created) > 40
    assert set(statuses.values()) <= {"ended", "cancelled", "expired", "failed"}, statuses
    assert "ended" in statuses.values() and "cancelled" in statuses.values()
    assert events.count("requested") == len(created)

"""What a waiting lease is told (its ETA, hosts and reasons) against what the plans then do:
a create fitted into the plan (engine/plan_insert.py) after a change no replan has seen yet is
told what the next full plan, with nothing changed since, gives it."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch
from tests.conftest import RELEASE, T0, headers
from tests.functional.test_plan_insert import create, fill, fitted, replan

ADMIN = headers("admin", "admin")


def told(runtime) -> dict[str, tuple[int | None, list[str] | None]]:
    """Each queued lease's ETA and planned hosts, as the rows have them."""
    with session_scope(runtime.sessions) as session:
        return {r.id: (to_epoch(r.queue_eta), r.planned_hosts)
                for r in session.scalars(select(m.Lease).where(m.Lease.status == "queued"))}


def test_a_create_fitted_after_a_drain_is_not_told_a_start_on_the_drained_host(client, runtime):
    """The 32 A100 are taken for 2 h; a fitted create keeps the plan in this process. An admin
    drains gpu-a100-2 (no replan: the engine's comes at its next pass). The creates fitted then
    were planned on the drained host at 10:00, and the full plan of the same inputs, with nothing
    changed since, started one of them an hour later: the ETA told was never the plan's."""
    runtime.fits.min_waiting = 0
    fill(client)
    create(client, "ml-vision", "a100.x8", 3)   # fitted: the plan is kept here from now on
    assert client.patch("/v1/hosts/gpu-a100-2", json={"drained": True}, headers=ADMIN).status_code == 200
    before = fitted(client)
    for _ in range(4):
        create(client, "nlp-lab", "a100.x8", 1)
    assert fitted(client) == before + 4   # still fitted: only the plan they are fitted into is new
    said = told(runtime)
    assert all("gpu-a100-2" not in (hosts or []) for _, hosts in said.values())
    replan(runtime)
    assert told(runtime) == said


def borrowed_and_asked(client, engine_tick) -> dict:
    """ml-vision runs 24 A100 for 10 h, 8 of them borrowed beyond its 16; nlp-lab 8. Once they
    run, nlp-lab asks for 8 more for 2 h (within its 16): no GPU is free until 18:00, but the
    borrowed ones may be reclaimed once they have run their minimum hour, at 09:00, and with the
    15 minutes' notice and the 5 s release the lease starts at 09:15:05. It is answered queued."""
    for project in ("ml-vision", "ml-vision", "ml-vision", "nlp-lab"):
        reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"}, headers=headers(project))
        assert reply.get_json()["lease"]["status"] == "scheduled"
    engine_tick()
    engine_tick(30)   # booted: active, so the borrower can be reclaimed
    reply = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H"}, headers=headers("nlp-lab"))
    lease = reply.get_json()["lease"]
    assert lease["status"] == "queued" and lease["queue"]["eta"] == "2026-12-01T09:15:05Z"
    assert "reclaim after 2026-12-01T09:00:00Z" in " ".join(r["message"] for r in lease["queue"]["reasons"])
    return lease


@pytest.mark.xfail(strict=True, reason="not fixed: kept as the plan's ETA without the reclaim; the engine's "
                                       "fix needs the same in the replay's model, which bench/engine_replay holds equal")
def test_the_first_eta_kept_is_the_one_the_answer_told(client, runtime, engine_tick):
    """The create's answer tells 09:15:05, the start the announced reclaim gives it; the ledger
    kept 18:00:05, the plan's start without the reclaim, as the lease's first ETA (and its first
    start-by from it): ETA honesty (/metrics, the figures) and keep_etas then hold the lease to a
    promise nine hours later than the one it was told."""
    lease = borrowed_and_asked(client, engine_tick)
    with session_scope(runtime.sessions) as session:
        row = session.get_one(m.Lease, lease["id"])
        assert to_epoch(row.first_eta) == to_epoch(row.queue_eta) == T0 + 75 * 60 + RELEASE
        assert to_epoch(row.first_start_by) == T0 + 75 * 60 + RELEASE   # (no margin learnt yet: the ETA)


@pytest.mark.xfail(strict=True, reason="a capacity reason names the plan's start without the reclaim that "
                                       "the ETA counts on")
def test_no_reason_names_an_earliest_start_later_than_the_eta(client, engine_tick):
    """The same answer says "capacity: ... earliest at 18:00:05" beside the ETA 09:15:05."""
    lease = borrowed_and_asked(client, engine_tick)
    eta = lease["queue"]["eta"]
    said = [r["message"] for r in lease["queue"]["reasons"] if "earliest at" in r["message"]]
    assert all(message.rsplit("earliest at ", 1)[1] <= eta for message in said), said

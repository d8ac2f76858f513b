"""planner_keep_etas through the API and the engine: the ETA a lease is answered with
at creation holds against a later, lighter project's lease that fair share alone puts
first; the ledger keeps the lease guarded (leases.eta_guarded) until it starts."""
from __future__ import annotations

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import RELEASE, T0, headers

H = 3600


@pytest.fixture(params=[True, False], ids=["keep_etas", "fair_share"])
def config(db_url, request):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       planner_keep_etas=request.param)


def ask(client, project: str, duration: str, instances: int = 1) -> dict:
    response = client.post("/v1/leases", json={"shape": "a100.x8", "duration": duration, "instances": instances},
                           headers=headers(project))
    assert response.status_code == 201, response.get_json()
    return response.get_json()["lease"]


def show(client, project: str, lease_id: str) -> dict:
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]


def test_a_lighter_projects_later_lease_fits_around_the_eta_given(app, client, runtime, sessions, engine_tick,
                                                                   config):
    # ml-vision fills the 32 A100 for 4 h, then asks for all of them for 1 h more (x): x is told
    # 4 h. An hour later nlp-lab, which has used nothing, asks for one host (y): fair share
    # puts y first, which pushes x back an hour; keep_etas keeps x's ETA and y goes after it
    with session_scope(sessions) as session:
        session.get_one(m.Quota, ("ml-vision", "A100")).gpus = 32
    for _ in range(4):
        assert ask(client, "ml-vision", "PT4H")["status"] == "scheduled"
    engine_tick()   # they boot now; the engine ends them at 4 h and the cloud releases their GPUs
    x = ask(client, "ml-vision", "PT1H", instances=4)
    told = T0 + 4 * H + RELEASE
    assert x["queue"]["eta"] == rfc3339(told)
    runtime.clock.advance(H)
    y = ask(client, "nlp-lab", "PT1H")
    x, y = show(client, "ml-vision", x["id"]), show(client, "nlp-lab", y["id"])
    with session_scope(sessions) as session:
        guarded = session.get_one(m.Lease, x["id"]).eta_guarded
        assert to_epoch(session.get_one(m.Lease, x["id"]).first_eta) == told
    if config.planner_keep_etas:
        assert (x["queue"]["position"], y["queue"]["position"]) == (1, 2)
        assert x["queue"]["eta"] == rfc3339(told)                       # kept
        assert y["queue"]["eta"] == rfc3339(told + H + RELEASE)         # around it
        assert any("keeps the ETA it was first told" in r["message"] for r in x["queue"]["reasons"])
        assert guarded
    else:
        assert (y["queue"]["position"], x["queue"]["position"]) == (1, 2)
        assert x["queue"]["eta"] == rfc3339(told + H + RELEASE)         # broken by fair share
        assert not guarded
    while runtime.clock.now() < told:   # ticks on the way, so that they end and are released
        engine_tick(min(20 * 60, told - runtime.clock.now()))
    first = x if config.planner_keep_etas else y
    owner = "ml-vision" if first is x else "nlp-lab"
    assert show(client, owner, first["id"])["status"] != "queued"       # started at the ETA it holds
    second = y if first is x else x
    assert show(client, "nlp-lab" if second is y else "ml-vision", second["id"])["status"] == "queued"

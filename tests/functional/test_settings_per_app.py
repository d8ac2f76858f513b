"""Each app plans with its own settings: the planner settings and the service's limits
are read from the app's config when it is made and passed explicitly from there, so
two apps in one process (as in these tests, or a WSGI server hosting two) never see
each other's. Both apps are made before either plans: a setting kept anywhere global
would be the last app's."""
from __future__ import annotations

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.demo.seed import seed
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import PG_URL, RELEASE, T0, empty_database, headers

H = 3600
# A: a wait bound of 1 h, GPUs held 10 min past each end, leases of at most 1 day.
# B: the defaults: no wait bound, the cloud's own release time, 90 days.
A = {"planner_wait_bound_seconds": H, "release_allowance_seconds": 600, "max_lease_duration_days": 1}
B: dict = {}


def make(url: str, options: dict):
    clock = VirtualClock(T0)
    config = Config.load(database_url=url, auth_strategy="noauth2", run_engine=True, **options)
    return create_app(config, clock=clock, cloud=SimulatedCloud.from_file(DEMO_CLOUD, clock), start_engine=False)


def ask(client, project: str, duration: str = "PT1H", dry_run: bool = False):
    return client.post("/v1/leases" + ("?dry_run=true" if dry_run else ""),
                       json={"shape": "a100.x8", "duration": duration}, headers=headers(project))


def queue(client, project: str, lease_id: str) -> dict:
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]["queue"]


def plan_two_waiting(app) -> tuple[dict, dict]:
    """ml-vision fills the 32 A100 for 4 h and asks for one more lease (x); 2 h later
    nlp-lab, which has used nothing, asks for one (y). Fair share alone puts y first;
    a wait bound of 1 h puts x, which has waited 2 h, first. Both start when the GPUs
    are back: 4 h from now plus the release allowance."""
    runtime, client = app.extensions["gpu_tenancy"], app.test_client()
    with session_scope(runtime.sessions) as session:
        seed(session, runtime.clock.now(), runtime.cloud.images())
        session.get(m.Quota, ("ml-vision", "A100")).gpus = 32
    runtime.engine.lifecycle.refresh_hosts()
    for _ in range(4):
        assert ask(client, "ml-vision", "PT4H").get_json()["lease"]["status"] == "scheduled"
    x = ask(client, "ml-vision").get_json()["lease"]
    runtime.clock.advance(2 * H)
    y = ask(client, "nlp-lab").get_json()["lease"]
    return queue(client, "ml-vision", x["id"]), queue(client, "nlp-lab", y["id"])


def test_two_apps_in_one_process_each_plan_with_their_own_settings(migrated, tmp_path):
    app_a = make(empty_database(migrated, tmp_path, "a"), A)
    app_b = make(empty_database(migrated, tmp_path, "b"), B)
    try:
        for app, options in ((app_a, A), (app_b, B)):
            runtime = app.extensions["gpu_tenancy"]
            assert runtime.engine.lifecycle.planner_settings is runtime.planner_settings   # one, built once
            assert runtime.planner_settings.wait_bound == options.get("planner_wait_bound_seconds")

        x, y = plan_two_waiting(app_a)
        assert (x["position"], y["position"]) == (1, 2)      # x has waited past A's bound: it goes first
        assert x["eta"] == rfc3339(T0 + 4 * H + 600)         # A's least release allowance
        assert any("has waited 1 hour or more" in r["message"] for r in x["reasons"])
        too_long = ask(app_a.test_client(), "nlp-lab", "P2D", dry_run=True)
        assert too_long.status_code == 400, too_long.get_json()   # A takes leases of at most a day
        assert too_long.get_json()["errors"][0]["code"] == "gpu_tenancy.over_service_max_duration"

        if PG_URL:   # one PostgreSQL database for both: emptied for B (each app's engine is idle)
            empty_database(migrated, tmp_path, "b")
        x, y = plan_two_waiting(app_b)
        assert (y["position"], x["position"]) == (1, 2)      # no bound: fair share, nlp-lab used nothing
        assert y["eta"] == rfc3339(T0 + 4 * H + RELEASE)     # the demo cloud's own release time
        assert not any("has waited" in r["message"] for r in x["reasons"])
        assert ask(app_b.test_client(), "nlp-lab", "P2D", dry_run=True).status_code == 200
    finally:
        for app in (app_a, app_b):
            app.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()

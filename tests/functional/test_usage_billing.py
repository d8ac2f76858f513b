"""Usage for billing: GPU-hours per project, user and GPU model over any range, as JSON
and CSV, rated with the operator's price per GPU-hour of each model."""
from __future__ import annotations

import csv
import io

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import T0, headers

HOUR = 3600
ANN, BOB = headers("ml-vision", user="ann"), headers("ml-vision", user="bob")
NLP = headers("nlp-lab", user="cho")
ADMIN = headers("ml-vision", "admin", user="ops")
WINDOW = f"?start={rfc3339(T0)}&end={rfc3339(T0 + 10 * HOUR)}"


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       usage_prices={"A100": 2.5}, usage_currency="EUR")


def ask(client, who, **body):
    reply = client.post("/v1/leases", json=body, headers=who)
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


@pytest.fixture
def used(client, engine_tick):
    """ann: 2 A100 x 2 h; bob: 1 A100 x 1 h and 1 H100 x 1 h; cho (nlp-lab): 1 A100 x 3 h."""
    ask(client, ANN, shape="a100.x2", duration="PT2H")
    ask(client, BOB, shape="a100.x1", duration="PT1H")
    ask(client, BOB, shape="h100.x1", duration="PT1H")
    ask(client, NLP, shape="a100.x1", duration="PT3H")
    engine_tick()
    for _ in range(12):
        engine_tick(HOUR // 2)


def figures(user_row):
    return {model: f["gpu_hours"] for model, f in user_row["gpu_models"].items()}


def test_usage_per_user_and_model_rated_with_the_prices(client, used):
    body = client.get("/v1/usage" + WINDOW, headers=ANN).get_json()["usage"]
    assert body["currency"] == "EUR"
    [project] = body["projects"]
    users = {u["user_id"]: u for u in project["users"]}
    assert {u: figures(row) for u, row in users.items()} == {"ann": {"A100": 4.0}, "bob": {"A100": 1.0, "H100": 1.0}}
    # the project's figures are the sum of its users'
    assert {m: f["gpu_hours"] for m, f in project["gpu_models"].items()} == {"A100": 5.0, "H100": 1.0}
    assert project["gpu_models"]["A100"] == {"gpu_hours": 5.0, "price_per_gpu_hour": 2.5, "rated": 12.5}
    assert project["gpu_models"]["H100"] == {"gpu_hours": 1.0, "price_per_gpu_hour": None, "rated": None}
    assert users["bob"]["rated_total"] == 2.5 and users["ann"]["rated_total"] == 10.0
    assert project["rated_total"] == body["rated_total"] == 12.5   # H100 has no price: not rated at nothing


def test_a_range_clips_each_users_hours(client, used):
    window = f"?start={rfc3339(T0 + HOUR // 2)}&end={rfc3339(T0 + 3 * HOUR // 2)}"
    [project] = client.get("/v1/usage" + window, headers=ANN).get_json()["usage"]["projects"]
    got = {u["user_id"]: figures(u) for u in project["users"]}
    assert got == {"ann": {"A100": 2.0}, "bob": {"A100": 0.5, "H100": 0.5}}   # bob's hours end at T0 + 1 h


def test_csv_has_a_row_per_project_user_and_model(client, used):
    reply = client.get("/v1/usage" + WINDOW + "&format=csv", headers=ADMIN)
    assert reply.status_code == 200 and reply.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    got = {(r["project_id"], r["user_id"], r["gpu_model"]): (float(r["gpu_hours"]), r["rated"]) for r in rows}
    assert got == {("ml-vision", "ann", "A100"): (4.0, "10.0"), ("ml-vision", "bob", "A100"): (1.0, "2.5"),
                   ("ml-vision", "bob", "H100"): (1.0, ""), ("nlp-lab", "cho", "A100"): (3.0, "7.5")}
    assert {r["currency"] for r in rows} == {"EUR"} and {r["start"] for r in rows} == {rfc3339(T0)}
    # a member's CSV is its own project's only
    mine = client.get("/v1/usage" + WINDOW + "&format=csv", headers=BOB).get_data(as_text=True)
    assert "nlp-lab" not in mine and "ann" in mine


def test_a_bad_format_or_price_is_refused(client):
    reply = client.get("/v1/usage?format=xml", headers=ANN)
    assert reply.status_code == 400 and "format must be one of: json, csv" in reply.get_json()["errors"][0]["detail"]
    for prices in ({"A100": -1}, {"A100": "2"}, ["A100"], {"A100": float("inf")}, {"A100": True}):
        with pytest.raises(ValueError, match="usage_prices"):
            Config.load(database_url="sqlite://", usage_prices=prices)


class FlaskAdapter:
    """keystoneauth's Adapter, as GpuClient calls it, over the app's test client."""

    def __init__(self, client, who):
        self.client, self.who = client, who

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        import types
        reply = self.client.open(path, method=method, json=json, query_string=params or {},
                                 headers={**self.who, **(headers or {})})
        return types.SimpleNamespace(status_code=reply.status_code, content=reply.get_data(),
                                     json=reply.get_json, headers=reply.headers, text=reply.get_data(as_text=True))


def test_openstack_gpu_usage_lists_the_csv_rows(client, used):
    """The command's rows are the API's CSV rows (`-f csv` prints them as such)."""
    import types

    from gpu_tenancy.osc.client import GpuClient
    from gpu_tenancy.osc.usage import HEADERS, ShowUsage

    app = types.SimpleNamespace(client_manager=types.SimpleNamespace(gpu=GpuClient(FlaskAdapter(client, ADMIN),
                                                                                      "ml-vision")))
    command = ShowUsage(app, None)
    args = command.get_parser("openstack gpu usage").parse_args(
        ["--start", rfc3339(T0), "--end", rfc3339(T0 + 10 * HOUR)])
    headers_, rows = command.take_action(args)
    assert headers_ == HEADERS
    csv_rows = list(csv.reader(io.StringIO(client.get("/v1/usage" + WINDOW + "&format=csv", headers=ADMIN)
                                           .get_data(as_text=True))))[1:]
    assert [[str(c) if c is not None else "" for c in row] for row in rows] == [r[2:] for r in csv_rows]
    mine = command.get_parser("x").parse_args(["--project", "nlp-lab", "--start", rfc3339(T0)])
    assert {row[0] for row in command.take_action(mine)[1]} == {"nlp-lab"}


def test_a_lease_still_waiting_has_used_none_of_the_budget(client, runtime, cloud, engine_tick):
    """Every H100 host is down: an h100.x4 lease for 4 h waits with no planned start. Two hours
    on it has used nothing; its 16 GPU-hours are all still to come. Before: its span was read
    from its requested start, so the budget showed 8 of them used (GPU-hours nobody held),
    and across a month's end would charge the old month for time it will run in the new one."""
    for host in ("gpu-h100-1", "gpu-h100-2"):
        cloud.set_host_state(host, up=False)
    engine_tick(advance=runtime.config.host_refresh_seconds)
    made = client.post("/v1/budgets", headers=headers("ml-vision", "admin", user="ops"), json={"budget": {
        "project_id": "ml-vision", "gpu_model": "H100", "gpu_hours": 100, "period": "month"}})
    assert made.status_code == 201, made.get_json()
    waiting = ask(client, ANN, shape="h100.x4", duration="PT4H")
    assert waiting["status"] == "queued" and waiting["start"] is None, waiting
    engine_tick(advance=2 * HOUR)
    budgets = client.get("/v1/budgets", headers=ANN).get_json()["budgets"]
    current = budgets[0]["current"]
    assert (current["used"], current["planned"]) == (0, 16), current

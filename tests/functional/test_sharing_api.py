"""Priority classes, budgets, extension windows and the external decision hook,
through the API: answers, figures in words, and the audit record."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpu_tenancy.timeutil import rfc3339
from tests.conftest import RELEASE, T0, headers

HOUR = 3600
ADMIN = headers("ml-vision", "admin", user="ops")
VISION = headers("ml-vision", "member", user="alice")
NLP = headers("nlp-lab", "member", user="bob")


def ok(response, status=200):
    assert response.status_code == status, response.get_json()
    return response.get_json()


def refused(response, status):
    assert response.status_code == status, response.get_json()
    return response.get_json()["errors"][0]["detail"]


def ask(client, who=VISION, **body):
    return client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", **body}, headers=who)


# -- priority classes ------------------------------------------------------------

def test_default_classes_in_order(client):
    classes = ok(client.get("/v1/priority_classes", headers=VISION))["priority_classes"]
    assert [(c["name"], c["priority"], c["preemptible"]) for c in classes] == [
        ("high", 10, False), ("normal", 0, False), ("low", -10, False), ("preemptible", -100, True)]


def test_a_class_says_who_may_use_it(client):
    assert "project ml-vision may not use priority class high" in refused(ask(client, priority_class="high"), 403)
    ok(client.put("/v1/priority_classes/high", json={"priority_class": {"priority": 10, "projects": ["ml-vision"]}},
                  headers=ADMIN))
    lease = ok(ask(client, priority_class="high"), 201)["lease"]
    assert (lease["priority_class"], lease["priority"], lease["preemptible"]) == ("high", 10, False)
    told = refused(ask(client, NLP, priority_class="high"), 403)
    assert "may not use priority class high; it is for other projects" in told and "ml-vision" not in told
    # a member sees of the projects allowed its own alone; an operator all of them
    shown = {who: ok(client.get("/v1/priority_classes/high", headers=h))["priority_class"]["projects"]
             for who, h in (("vision", VISION), ("nlp", NLP), ("admin", ADMIN))}
    assert shown == {"vision": ["ml-vision"], "nlp": [], "admin": ["ml-vision"]}
    listed = ok(client.get("/v1/priority_classes", headers=NLP))["priority_classes"]
    assert [(c["name"], c["projects"]) for c in listed if c["name"] in ("high", "normal")] == [
        ("high", []), ("normal", None)]
    assert "unknown priority class 'urgent'; the classes are: high, normal, low, preemptible" in refused(
        ask(client, priority_class="urgent"), 400)
    assert "not both" in refused(ask(client, priority_class="low", priority=-5), 400)


def test_class_changes_are_audited_and_leases_keep_their_copy(client):
    lease = ok(ask(client, priority_class="low"), 201)["lease"]
    ok(client.put("/v1/priority_classes/low", json={"priority_class": {"priority": -20}}, headers=ADMIN))
    assert client.delete("/v1/priority_classes/low", headers=ADMIN).status_code == 204
    assert client.get("/v1/priority_classes/low", headers=VISION).status_code == 404
    assert ok(client.get(f"/v1/leases/{lease['id']}", headers=VISION))["lease"]["priority"] == -10
    audit = ok(client.get("/v1/audit?action=priority_class.update&action=priority_class.delete",
                          headers=ADMIN))["audit_records"]
    assert [(r["action"], (r["before"] or {}).get("priority"), (r["after"] or {}).get("priority"))
            for r in audit] == [("priority_class.update", -10, -20), ("priority_class.delete", -20, None)]


def test_bad_class_input_is_refused(client):
    assert refused(client.put("/v1/priority_classes/Bad%20Name", json={"priority_class": {"priority": 1}},
                              headers=ADMIN), 400)
    assert refused(client.put("/v1/priority_classes/x", json={"priority_class": {"priority": 1000}},
                              headers=ADMIN), 400)
    assert refused(client.put("/v1/priority_classes/x", json={"priority_class": {}}, headers=ADMIN), 400)


def test_a_preemptible_lease_runs_beyond_quota_on_idle_gpus(client):
    # nlp-lab may hold 16 A100; a preemptible lease of 24 runs, since 32 are idle
    lease = ok(client.post("/v1/leases", json={"shape": "a100.x8", "instances": 3, "duration": "PT4H",
                                               "priority_class": "preemptible"}, headers=NLP), 201)["lease"]
    assert (lease["status"], lease["preemptible"], lease["borrowing"]) == ("scheduled", True, False)
    # and takes none of its quota: 16 normal GPUs still fit under it (on the last free host: 8 now)
    normal = ok(client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=NLP), 201)
    assert normal["lease"]["status"] == "scheduled"


def test_preemptible_leases_take_no_quota_when_a_lease_is_extended(client, engine_tick):
    # nlp-lab may hold 16 A100: 16 within quota and 8 preemptible beside them (24 of 32 in use)
    pre = ok(client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H",
                                             "priority_class": "preemptible"}, headers=NLP), 201)["lease"]
    normal = ok(client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H"},
                            headers=NLP), 201)["lease"]
    engine_tick()
    # the quota's 16 are the normal lease's alone: extended, it still holds 16 of 16
    assert ok(client.patch(f"/v1/leases/{normal['id']}", json={"duration": "PT3H"}, headers=NLP))["lease"]["end"] \
        == rfc3339(T0 + 3 * HOUR)
    # and a preemptible lease bigger than the quota is extended on idle GPUs as it was made there
    big = ok(client.post("/v1/leases", json={"shape": "a100.x8", "instances": 3, "duration": "PT1H",
                                             "priority_class": "preemptible"}, headers=VISION), 201)["lease"]
    ok(client.delete(f"/v1/leases/{pre['id']}", headers=NLP), 204)
    ok(client.delete(f"/v1/leases/{normal['id']}", headers=NLP), 204)
    for _ in range(3):
        engine_tick(advance=60)
    big = ok(client.get(f"/v1/leases/{big['id']}", headers=VISION))["lease"]
    assert (big["status"], big["allocations"][0]["gpus"] * len(big["allocations"])) == ("active", 24)
    end = big["end"]
    assert ok(client.patch(f"/v1/leases/{big['id']}", json={"duration": "PT2H"}, headers=VISION))["lease"]["end"] \
        > end


# -- budgets ------------------------------------------------------------------------

def budget(client, project="ml-vision", hours=10, **extra):
    return ok(client.post("/v1/budgets", json={"budget": {"project_id": project, "gpu_model": "A100",
                                                          "gpu_hours": hours, "period": "month", **extra}},
                          headers=ADMIN), 201)["budget"]


def test_a_lease_that_would_pass_the_budget_is_refused_with_the_figures(client):
    b = budget(client)
    assert b["current"] == {"start": "2026-12-01T00:00:00Z", "end": "2027-01-01T00:00:00Z", "used": 0.0,
                            "planned": 0.0, "left": 10.0}
    first = ok(client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT2H"}, headers=VISION), 201)
    assert refused(client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT2H"}, headers=VISION),
                   403) == ("refused for budget: it needs 4 A100 GPU-hours in December 2026; project ml-vision's "
                            "budget there is 10: 0 used, 8 planned, 2 left")
    # a dry run is refused the same way; another project's budget is its own
    assert client.post("/v1/leases?dry_run=true", json={"shape": "a100.x2", "duration": "PT2H"},
                       headers=VISION).status_code == 403
    ok(client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT2H"}, headers=NLP), 201)
    shown = ok(client.get(f"/v1/budgets/{b['id']}", headers=VISION))["budget"]
    assert shown["current"]["planned"] == 8.0 and shown["current"]["left"] == 2.0
    assert first["lease"]["status"] == "scheduled"


def test_an_early_end_gives_back_what_was_not_used(client, engine_tick):
    b = budget(client)
    lease = ok(client.post("/v1/leases", json={"shape": "a100.x4", "duration": "PT2H"}, headers=VISION), 201)
    engine_tick()
    engine_tick(advance=30 * 60)                                     # 30 minutes on 4 GPUs: 2 GPU-hours
    assert client.delete(f"/v1/leases/{lease['lease']['id']}", headers=VISION).status_code == 204
    engine_tick(advance=10)
    current = ok(client.get(f"/v1/budgets/{b['id']}", headers=VISION))["budget"]["current"]
    assert (current["used"], current["planned"], current["left"]) == (2.0, 0.0, 8.0)
    usage = ok(client.get("/v1/usage", headers=VISION))["usage"]["projects"][0]
    assert usage["gpu_models"]["A100"]["gpu_hours"] == 2.0
    assert usage["budgets"] == [{"id": b["id"], "gpu_model": "A100", "gpu_hours": 10.0, "period": "month",
                                 "current": current}]


def test_an_extension_past_the_budget_is_refused(client, engine_tick):
    budget(client, hours=5)
    lease = ok(client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT2H"}, headers=VISION), 201)
    engine_tick()
    assert refused(client.patch(f"/v1/leases/{lease['lease']['id']}", json={"duration": "PT3H"}, headers=VISION),
                   403) == ("refused for budget: it needs 2 A100 GPU-hours in December 2026; project ml-vision's "
                            "budget there is 5: 0 used, 4 planned, 1 left")


def test_a_budget_over_a_custom_range(client):
    start, end = rfc3339(T0 + HOUR), rfc3339(T0 + 3 * HOUR)
    b = budget(client, hours=2, period="range", start=start, end=end)
    assert (b["start"], b["end"], b["current"]["start"]) == (start, end, start)
    # 1 GPU from now for 2 hours: 1 of its GPU-hours falls in the range; 3 hours: 2 of them
    ok(ask(client, duration="PT2H"), 201)
    assert "it needs 2 A100 GPU-hours in 2026-12-01T09:00:00Z to 2026-12-01T11:00:00Z" in refused(
        ask(client, duration="PT3H"), 403)


def test_bad_budgets_are_refused(client):
    post = lambda **b: client.post("/v1/budgets", json={"budget": {  # noqa: E731
        "project_id": "ml-vision", "gpu_model": "A100", "gpu_hours": 1, "period": "month", **b}}, headers=ADMIN)
    assert "needs start and end" in refused(post(period="range"), 400)
    assert "takes no start or end" in refused(post(start=rfc3339(T0)), 400)
    assert "unknown GPU model V100" in refused(post(gpu_model="V100"), 400)
    assert refused(post(gpu_hours=-1), 400)
    assert refused(client.get("/v1/budgets/nope", headers=ADMIN), 404)


def test_budgets_are_listed_per_project(client):
    budget(client)
    budget(client, project="nlp-lab", hours=3)
    assert [b["project_id"] for b in ok(client.get("/v1/budgets", headers=ADMIN))["budgets"]] == [
        "ml-vision", "nlp-lab"]
    assert [b["gpu_hours"] for b in ok(client.get("/v1/budgets", headers=NLP))["budgets"]] == [3.0]
    actions = [r["action"] for r in ok(client.get("/v1/audit?action=budget.create", headers=ADMIN))["audit_records"]]
    assert actions == ["budget.create", "budget.create"]


# -- extension window ------------------------------------------------------------------

def test_extension_only_in_the_final_window(client, runtime, engine_tick):
    runtime.config.extension_window_seconds = 2 * HOUR
    lease = ok(client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT6H"}, headers=VISION), 201)
    lid = lease["lease"]["id"]
    engine_tick()
    assert refused(client.patch(f"/v1/leases/{lid}", json={"duration": "PT7H"}, headers=VISION), 409) == (
        "the extension is refused: a lease may be extended only in its last 2 hours; this one ends at "
        "2026-12-01T14:00:00Z, so ask from 2026-12-01T12:00:00Z")
    engine_tick(advance=4 * HOUR)
    assert ok(client.patch(f"/v1/leases/{lid}", json={"duration": "PT7H"}, headers=VISION))["lease"]["end"] == \
        "2026-12-01T15:00:00Z"


def test_a_refused_extension_says_until_when_the_gpus_are_free(client, engine_tick):
    # the cloud is full: ml-vision until 10:00, nlp-lab until 11:00; ml-vision's next lease is planned at 10:00
    mine = ok(client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H"},
                          headers=VISION), 201)["lease"]
    ok(client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT3H"}, headers=NLP), 201)
    waiting = ok(client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=VISION), 201)
    assert waiting["lease"]["queue"]["eta"] == rfc3339(T0 + 2 * HOUR + RELEASE)
    engine_tick()
    detail = refused(client.patch(f"/v1/leases/{mine['id']}", json={"duration": "PT3H"}, headers=VISION), 409)
    assert detail == (f"the extension is refused: extending to 2026-12-01T11:00:00Z would delay lease "
                      f"{waiting['lease']['id']} (planned at 2026-12-01T10:00:05Z, would start at "
                      f"2026-12-01T11:00:05Z); the GPUs are not free past its end at 2026-12-01T10:00:00Z")


# -- the external decision hook ------------------------------------------------------

class Decisions(BaseHTTPRequestHandler):
    """The operator's service: accepts leases, refuses extensions with a message,
    and is slow when asked to end one."""
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - the http.server name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Decisions.seen.append(body)
        if body["action"] == "end":
            time.sleep(1.5)
        if body["action"] == "extend":
            payload = json.dumps({"message": f"project {body['lease']['project_id']} has no credit left"}).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def decision_service():
    server = ThreadingHTTPServer(("127.0.0.1", 18951), Decisions)
    Decisions.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/decide"
    server.shutdown()
    server.server_close()


def test_the_decision_hook_accepts_refuses_and_times_out(client, runtime, engine_tick, decision_service):
    runtime.config.decision_hook_url = decision_service
    runtime.config.decision_hook_timeout_seconds = 0.5
    lease = ok(ask(client), 201)["lease"]
    engine_tick()
    assert Decisions.seen[0]["action"] == "accept"
    assert Decisions.seen[0]["lease"]["project_id"] == "ml-vision"
    assert Decisions.seen[0]["requested_by"] == {"user_id": "alice"}
    assert refused(client.patch(f"/v1/leases/{lease['id']}", json={"duration": "PT2H"}, headers=VISION), 403) == (
        "the extend was refused by the operator's decision service: project ml-vision has no credit left")
    assert ok(client.get(f"/v1/leases/{lease['id']}", headers=VISION))["lease"]["duration"] == HOUR
    # the end is asked about, the service is too slow: the default (allow) decides
    assert client.delete(f"/v1/leases/{lease['id']}", headers=VISION).status_code == 204
    assert [s["action"] for s in Decisions.seen] == ["accept", "extend", "end"]
    runtime.config.decision_hook_default = "deny"
    other = ok(ask(client), 201)["lease"]
    assert "gave no answer (it could not be reached (ReadTimeout)), and the default is to refuse" in refused(
        client.delete(f"/v1/leases/{other['id']}", headers=VISION), 403)
    assert ok(client.get(f"/v1/leases/{other['id']}", headers=VISION))["lease"]["status"] == "scheduled"


def test_an_unreachable_decision_service_follows_the_default(client, runtime):
    runtime.config.decision_hook_url = "http://127.0.0.1:18952/nobody-listens"
    runtime.config.decision_hook_default = "deny"
    assert "could not be reached (ConnectionError)" in refused(ask(client), 403)
    assert ok(client.get("/v1/leases", headers=VISION))["leases"] == []
    runtime.config.decision_hook_default = "allow"
    assert ask(client).status_code == 201

"""Every endpoint for every persona: reader, member and admin of project A
(ml-vision), a member of project B (nlp-lab), and no identity at all."""
from __future__ import annotations

import itertools

import pytest

from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config
from tests.conftest import headers

A, B = "ml-vision", "nlp-lab"
PERSONAS = {
    "reader_a": headers(A, "reader"),
    "member_a": headers(A, "member"),
    "admin_a": headers(A, "admin"),
    "member_b": headers(B, "member"),
    "anonymous": {},
}
NEW_SHAPE = {"name": "a100.x3", "gpu_model": "A100", "gpus": 3, "vcpus": 36, "ram_mb": 368640, "disk_gb": 150,
             "pci_alias": "a100"}
NEW_IMAGE = {"name": "debian-12", "cloud_ref": "7d3c0c8e-0000-4000-8000-000000000001"}
QUOTA = {"quota": {"gpu_models": {"A100": {"gpus": 8}}}}
LEASE = {"shape": "a100.x1", "duration": "PT1H"}
CLASS = {"priority_class": {"priority": 20, "projects": [A]}}
BUDGET = {"budget": {"project_id": A, "gpu_model": "A100", "gpu_hours": 500, "period": "month"}}
WEBHOOK = {"webhook": {"url": "https://hooks.example/gpu"}}

# (method, path, body): expected status per persona, in PERSONAS order.
# {lease} is a lease of project A. Another project's lease is 404: it does not exist for the caller.
TABLE = [
    ("GET", "/v1/leases", None, (200, 200, 200, 200, 401)),
    ("POST", "/v1/leases", LEASE, (403, 201, 201, 201, 401)),
    ("POST", "/v1/leases?dry_run=true", LEASE, (403, 200, 200, 200, 401)),
    ("GET", "/v1/leases?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/leases/{lease}", None, (200, 200, 200, 404, 401)),
    ("GET", "/v1/leases/{lease}/events", None, (200, 200, 200, 404, 401)),
    ("PATCH", "/v1/leases/{lease}", {"duration": "PT2H"}, (403, 200, 200, 404, 401)),
    ("DELETE", "/v1/leases/{lease}", None, (403, 204, 204, 404, 401)),
    # the guest's report needs the lease's secret (X-Lease-Token), which no Keystone identity is
    ("POST", "/v1/leases/{lease}/readiness", {"instance": 0, "ok": True}, (401, 401, 401, 401, 401)),
    ("POST", "/v1/leases/{lease}/utilization", {"instance": 0, "gpus": []}, (401, 401, 401, 401, 401)),
    # done: the lease's secret, or a member's token; this lease is not running yet (409)
    ("POST", "/v1/leases/{lease}/done", None, (403, 409, 409, 404, 401)),
    # resume: members and admins; this lease is not parked (409)
    ("POST", "/v1/leases/{lease}/resume", None, (403, 409, 409, 404, 401)),
    ("GET", "/v1/shapes", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/shapes?include_retired=true", None, (403, 403, 200, 403, 401)),
    ("POST", "/v1/shapes", NEW_SHAPE, (403, 403, 201, 403, 401)),
    ("GET", "/v1/shapes/a100.x1", None, (200, 200, 200, 200, 401)),
    ("DELETE", "/v1/shapes/a100.x1", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/images", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/images?include_retired=true", None, (403, 403, 200, 403, 401)),
    ("POST", "/v1/images", NEW_IMAGE, (403, 403, 201, 403, 401)),
    ("GET", "/v1/images/rocky-9-cuda-12", None, (200, 200, 200, 200, 401)),
    ("DELETE", "/v1/images/rocky-9-cuda-12", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/quotas", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/quotas?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/quotas/ml-vision", None, (200, 200, 200, 403, 401)),
    ("PUT", "/v1/quotas/ml-vision", QUOTA, (403, 403, 200, 403, 401)),
    ("PATCH", "/v1/quotas/ml-vision", QUOTA, (403, 403, 200, 403, 401)),
    ("GET", "/v1/priority_classes", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/priority_classes/high", None, (200, 200, 200, 200, 401)),
    ("PUT", "/v1/priority_classes/high", CLASS, (403, 403, 200, 403, 401)),
    ("DELETE", "/v1/priority_classes/low", None, (403, 403, 204, 403, 401)),
    ("GET", "/v1/budgets", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/budgets?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("POST", "/v1/budgets", BUDGET, (403, 403, 201, 403, 401)),
    ("GET", "/v1/budgets/{budget}", None, (200, 200, 200, 404, 401)),   # another project's: none
    ("DELETE", "/v1/budgets/{budget}", None, (403, 403, 204, 403, 401)),
    ("GET", "/v1/capacity", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/capacity?start=2026-12-01T08:00:00Z&end=2026-12-02T08:00:00Z", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/usage", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/usage?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/queue", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/queue?gpu_model=A100", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/share", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/share?gpu_model=H100", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/volumes", None, (200, 200, 200, 200, 401)),
    ("GET", "/v1/volumes?project_id=ml-vision", None, (200, 200, 200, 403, 401)),
    ("GET", "/v1/hosts", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/hosts/gpu-a100-1", None, (403, 403, 200, 403, 401)),
    ("PATCH", "/v1/hosts/gpu-a100-1", {"drained": True}, (403, 403, 200, 403, 401)),
    ("GET", "/v1/audit", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/audit?format=csv", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/webhooks/ml-vision", None, (404, 404, 404, 403, 401)),   # none set yet
    ("PUT", "/v1/webhooks/ml-vision", WEBHOOK, (403, 200, 200, 403, 401)),
    ("DELETE", "/v1/webhooks/ml-vision", None, (403, 404, 404, 403, 401)),
    ("GET", "/v1/openapi.json", None, (200, 200, 200, 200, 200)),
    ("POST", "/v1/whatif", {"days": 1, "changes": ["weight.ml-vision=2"]}, (403, 403, 202, 403, 401)),
    ("GET", "/v1/whatif", None, (403, 403, 200, 403, 401)),
    ("GET", "/v1/whatif/nope", None, (403, 403, 404, 403, 401)),   # no such what-if
]
CASES = [pytest.param(method, path, body, persona, expected, id=f"{method} {path} as {persona}")
         for method, path, body, statuses in TABLE
         for persona, expected in zip(PERSONAS, statuses)]


@pytest.fixture
def lease_of_a(client):
    response = client.post("/v1/leases", json={"shape": "a100.x2", "duration": "PT1H"}, headers=headers(A))
    assert response.status_code == 201
    return response.get_json()["lease"]["id"]


@pytest.fixture
def budget_of_a(client):
    response = client.post("/v1/budgets", json=BUDGET, headers=PERSONAS["admin_a"])
    assert response.status_code == 201
    return response.get_json()["budget"]["id"]


@pytest.mark.parametrize("method, path, body, persona, expected", CASES)
def test_each_persona_gets_the_right_status(client, lease_of_a, budget_of_a, method, path, body, persona,
                                            expected):
    response = client.open(path.format(lease=lease_of_a, budget=budget_of_a), method=method, json=body,
                           headers=PERSONAS[persona])
    assert response.status_code == expected, response.get_json()
    if expected >= 400:
        error = response.get_json()["errors"][0]
        assert error["status"] == expected and error["request_id"] == response.headers["X-OpenStack-Request-Id"]
        assert error["detail"]
        if expected == 401:
            assert ("X-Lease-Token" if path.endswith(("/readiness", "/utilization")) else "X-Auth-Token") \
                in error["detail"]


def test_the_table_covers_every_endpoint_and_method(app):
    covered = {(method, path.split("?")[0].replace("{lease}", "<lease_id>").replace("{budget}", "<budget_id>")
                .replace("/high", "/<name>").replace("/low", "/<name>")) for method, path, _, _ in TABLE}
    covered = {(method, path.replace("/a100.x1", "/<name>").replace("/rocky-9-cuda-12", "/<name>")
                .replace("/gpu-a100-1", "/<name>").replace("/ml-vision", "/<project_id>")
                .replace("/whatif/nope", "/whatif/<job_id>")) for method, path in covered}
    routes = {(method, rule.rule) for rule in app.url_map.iter_rules() if rule.rule.startswith("/v1")
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert routes - covered == set()


def test_listings_show_a_project_only_its_own(client, lease_of_a, budget_of_a):
    assert client.get("/v1/budgets", headers=PERSONAS["member_b"]).get_json()["budgets"] == []
    assert [b["id"] for b in client.get("/v1/budgets", headers=PERSONAS["reader_a"]).get_json()["budgets"]] == [
        budget_of_a]
    leases_b = client.get("/v1/leases", headers=PERSONAS["member_b"]).get_json()["leases"]
    assert lease_of_a not in [lease["id"] for lease in leases_b]
    quotas_b = client.get("/v1/quotas", headers=PERSONAS["member_b"]).get_json()["quotas"]
    assert [q["project_id"] for q in quotas_b] == [B]
    usage_b = client.get("/v1/usage", headers=PERSONAS["member_b"]).get_json()["usage"]["projects"]
    assert [u["project_id"] for u in usage_b] == [B]


def test_a_reader_cannot_change_a_lease_it_can_see(client, lease_of_a):
    response = client.delete(f"/v1/leases/{lease_of_a}", headers=PERSONAS["reader_a"])
    assert response.status_code == 403
    shown = client.get(f"/v1/leases/{lease_of_a}", headers=PERSONAS["reader_a"]).get_json()["lease"]
    assert shown["status"] == "scheduled"


# Existence oracles: what a member of B is told of project A's ids must be what it is told of
# ids that name nothing, in status, code and wording (the id asked for aside), or B learns
# which of A's leases and budgets exist. Each path parameter a project owns, its two values:
# A's, and one that names nothing.
OWNED = {"lease_id": ("{lease}", "00000000-0000-4000-8000-00000000dead"),
         "budget_id": ("{budget}", "00000000-0000-4000-8000-00000000beef"),
         "project_id": (A, "no-such-project")}
# ids of what belongs to no project: the catalogs everyone reads, the hosts and what-ifs of admins
NOT_OWNED = {"name", "job_id"}
# a body each route reads, so that the request reaches the id's lookup
BODIES = {("PATCH", "/v1/leases/<lease_id>"): {"duration": "PT3H"},
          ("PUT", "/reservation/v1/leases/<lease_id>"): {"name": "renamed"},
          ("POST", "/v1/leases/<lease_id>/readiness"): {"instance": 0, "ok": True},
          ("POST", "/v1/leases/<lease_id>/utilization"): {"instance": 0, "gpus": []},
          ("POST", "/v1/leases/<lease_id>/done"): {},
          ("PUT", "/v1/quotas/<project_id>"): QUOTA,
          ("PUT", "/v1/webhooks/<project_id>"): WEBHOOK}
# listings by the ids in their query: A's, and one that names nothing
LISTED = {**{f"/v1/{listing}?project_id={{}}": OWNED["project_id"]
             for listing in ("leases", "budgets", "quotas", "usage", "volumes")},
          "/v1/leases?marker={}": OWNED["lease_id"]}
# who asks: B's member, and with a guess at a lease's secret (the routes its VMs call), beside
# B's token or alone
GUESSED_SECRET = {"X-Lease-Token": "a-guess-at-the-lease-secret-0123456789"}
SENDERS = {"member_b": PERSONAS["member_b"], "member_b with a secret": {**PERSONAS["member_b"], **GUESSED_SECRET},
           "a secret alone": GUESSED_SECRET}


def told(response, asked: str) -> tuple:
    """What an answer tells: its status and body, the id asked for and the request id taken out."""
    body = response.get_data(as_text=True).replace(asked, "<id>").replace(asked[:36], "<id>")
    request_id = response.headers.get("X-OpenStack-Request-Id")
    return response.status_code, body.replace(request_id, "<request id>") if request_id else body


def test_another_projects_ids_are_answered_as_ids_that_name_nothing(app, client, lease_of_a, budget_of_a):
    client.put(f"/v1/webhooks/{A}", json=WEBHOOK, headers=PERSONAS["member_a"])
    routes = [(method, rule.rule, rule.arguments) for rule in app.url_map.iter_rules()
              if rule.rule.startswith(("/v1/", "/reservation/")) and rule.arguments
              for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    assert {arg for _, _, arguments in routes for arg in arguments} <= set(OWNED) | NOT_OWNED
    walked, told_apart = 0, []
    for (method, rule, arguments), sender in itertools.product(routes, SENDERS):
        if not arguments & set(OWNED):
            continue
        (argument,) = arguments
        answers = []
        for value in OWNED[argument]:
            asked = value.format(lease=lease_of_a, budget=budget_of_a)
            response = client.open(rule.replace(f"<{argument}>", asked), method=method,
                                   json=BODIES.get((method, rule)), headers=SENDERS[sender])
            assert response.status_code in (400, 401, 403, 404), (method, rule, response.get_data(as_text=True))
            answers.append(told(response, asked))
        if answers[0] != answers[1]:
            told_apart.append((method, rule, sender, *answers))
        walked += 1
    for listing, values in LISTED.items():   # and the ids a listing takes in its query
        answers = [told(client.get(listing.format(value), headers=PERSONAS["member_b"]), value)
                   for value in (v.format(lease=lease_of_a) for v in values)]
        if answers[0] != answers[1]:
            told_apart.append(("GET", listing, *answers))
    assert told_apart == [] and walked >= 45, "\n".join(map(str, told_apart))


@pytest.fixture
def members_manage_budgets(db_url, clock, cloud, app, tmp_path):   # `app` seeds the catalog into db_url
    policy = tmp_path / "policy.yaml"
    # an operator's: each project's members set and remove their own project's budgets
    policy.write_text('"budget:manage": "role:admin or (role:member and project_id:%(project_id)s)"\n')
    config = Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, policy_file=str(policy))
    return create_app(config, clock=clock, cloud=cloud, start_engine=False).test_client()


def test_a_project_scoped_budget_rule_keeps_each_project_to_its_own_budgets(members_manage_budgets, budget_of_a):
    """budget:manage was asked of the caller's own project, never of the budget's: under a rule
    that names the project, a member of B set budgets on A (a zero budget stops A's leases) and
    removed A's."""
    client = members_manage_budgets
    on_a = {"budget": {**BUDGET["budget"], "gpu_hours": 0}}
    assert client.post("/v1/budgets", json=on_a, headers=PERSONAS["member_b"]).status_code == 403
    unknown = client.delete("/v1/budgets/00000000-0000-4000-8000-00000000beef", headers=PERSONAS["member_b"])
    theirs = client.delete(f"/v1/budgets/{budget_of_a}", headers=PERSONAS["member_b"])
    assert told(theirs, budget_of_a) == told(unknown, "00000000-0000-4000-8000-00000000beef")
    assert theirs.status_code == 404
    listed = client.get("/v1/budgets", headers=PERSONAS["reader_a"]).get_json()["budgets"]
    assert [(b["id"], b["gpu_hours"]) for b in listed] == [(budget_of_a, 500)]
    on_b = {"budget": {**BUDGET["budget"], "project_id": B}}
    assert client.post("/v1/budgets", json=on_b, headers=PERSONAS["member_b"]).status_code == 201
    assert client.delete(f"/v1/budgets/{budget_of_a}", headers=PERSONAS["member_a"]).status_code == 204

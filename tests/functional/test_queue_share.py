"""Everyone's queue (/v1/queue) and fair-share standing (/v1/share) through the API:
what a member sees of other projects (no names), what an admin sees, the answers
against the OpenAPI document, and that the share rank is the order the planner
starts leases in."""
from __future__ import annotations

import json
import random
import re

import pytest

from gpu_tenancy.timeutil import rfc3339
from tests.conftest import T0, headers
from tests.functional.test_openapi import response_validator

HOUR = 3600
ADMIN = headers("ops", "admin", user="operator")
VISION = headers("ml-vision", "member", user="alice")
NLP = headers("nlp-lab", "member", user="bob")


def ok(response, status=200):
    assert response.status_code == status, response.get_json()
    return response.get_json()


def ask(client, who, shape="a100.x8", instances=1, duration="PT1H", **body):
    return ok(client.post("/v1/leases", json={"shape": shape, "instances": instances, "duration": duration, **body},
                          headers=who), 201)["lease"]


@pytest.fixture
def document(client):
    return client.get("/v1/openapi.json").get_json()


@pytest.fixture
def contended(client):
    """Both demo projects hold their 16 A100 (the cloud's 32), and each has one more waiting."""
    for who in (VISION, NLP):
        assert ask(client, who, instances=2, duration="PT2H")["status"] == "scheduled"
    vision = ask(client, VISION, name="vision-next")
    nlp = ask(client, NLP, name="nlp-secret-run")
    assert vision["status"] == nlp["status"] == "queued"
    return vision, nlp


def test_a_member_sees_every_waiting_lease_in_order_and_no_other_projects_names(client, contended, document):
    vision, nlp = contended
    body = ok(client.get("/v1/queue", headers=VISION))
    response_validator(document, "/v1/queue", "get", 200).validate(body)
    leases = body["queue"]["leases"]
    assert [(e["gpu_model"], e["position"]) for e in leases] == [("A100", 1), ("A100", 2)]
    mine = [e for e in leases if not e["hidden"]]
    theirs = [e for e in leases if e["hidden"]]
    assert len(mine) == len(theirs) == 1
    assert (mine[0]["lease_id"], mine[0]["name"], mine[0]["project"]) == (vision["id"], "vision-next", "ml-vision")
    assert (theirs[0]["lease_id"], theirs[0]["name"], theirs[0]["project_id"]) == (None, None, None)
    assert theirs[0]["project"] == "another project"
    assert (theirs[0]["shape"], theirs[0]["gpus"]) == ("a100.x8", 8) and theirs[0]["eta"] is not None
    # each waits for its own project's quota: the member reads its own reason in full, the other's unnamed
    assert mine[0]["reason"]["code"] == "quota" and "ml-vision" in mine[0]["reason"]["message"]
    assert theirs[0]["reason"] == {"code": "quota", "message": "waits for its project's quota"}
    text = json.dumps(body)
    assert "nlp-lab" not in text and nlp["id"] not in text and "nlp-secret-run" not in text
    # the positions and ETAs are the ones each lease shows itself
    own = ok(client.get(f"/v1/leases/{vision['id']}", headers=VISION))["lease"]["queue"]
    assert (mine[0]["position"], mine[0]["eta"]) == (own["position"], own["eta"])


def test_an_admin_sees_every_project_and_name(client, contended, document):
    vision, nlp = contended
    body = ok(client.get("/v1/queue", headers=ADMIN))
    response_validator(document, "/v1/queue", "get", 200).validate(body)
    leases = body["queue"]["leases"]
    assert not any(e["hidden"] for e in leases)
    assert {(e["lease_id"], e["name"], e["project"]) for e in leases} == {
        (vision["id"], "vision-next", "ml-vision"), (nlp["id"], "nlp-secret-run", "nlp-lab")}
    assert "nlp-lab" in {e["project_id"] for e in leases}


def test_the_queue_filters_by_gpu_model_and_refuses_a_malformed_one(client, contended):
    assert ok(client.get("/v1/queue?gpu_model=H100", headers=VISION))["queue"] == {
        "now": "2026-12-01T08:00:00Z", "gpu_model": "H100", "leases": []}
    assert len(ok(client.get("/v1/queue?gpu_model=A100", headers=VISION))["queue"]["leases"]) == 2
    for bad in ("A 100", "x" * 65, "../A100"):
        reply = client.get("/v1/queue", query_string={"gpu_model": bad}, headers=VISION)
        assert reply.status_code == 400 and reply.get_json()["errors"][0]["code"] == "gpu_tenancy.invalid_query"
        reply = client.get("/v1/share", query_string={"gpu_model": bad}, headers=VISION)
        assert reply.status_code == 400


@pytest.mark.parametrize("path", ["/v1/queue", "/v1/share"])
def test_a_gpu_model_the_cloud_has_not_is_refused_not_an_empty_list(client, contended, path):
    """`openstack gpu queue --gpu-model h100` (the shapes are written a100.x8, the models A100)
    printed nothing and exited 0, as if nobody waited; now 400 naming the cloud's models."""
    for unknown in ("h100", "B200"):
        reply = client.get(path, query_string={"gpu_model": unknown}, headers=VISION)
        assert reply.status_code == 400, reply.get_json()
        error = reply.get_json()["errors"][0]
        assert error["code"] == "gpu_tenancy.unknown_gpu_model"
        assert error["detail"] == f"unknown GPU model '{unknown}'; the cloud's GPU models are: A100, H100"


def test_both_views_need_a_token(client):
    for path in ("/v1/queue", "/v1/share"):
        assert client.get(path).status_code == 401


def test_share_shows_a_member_its_row_and_the_others_unnamed(client, contended, document):
    body = ok(client.get("/v1/share", headers=VISION))
    response_validator(document, "/v1/share", "get", 200).validate(body)
    share = body["share"]
    assert share["half_life"] == 7 * 86400
    a100 = [r for r in share["projects"] if r["gpu_model"] == "A100"]
    mine = [r for r in a100 if not r["hidden"]]
    assert len(a100) == 2 and len(mine) == 1
    assert mine[0]["project"] == "ml-vision"
    assert (mine[0]["nominal_gpus"], mine[0]["borrow_gpus"], mine[0]["in_use_gpus"], mine[0]["borrowed_gpus"],
            mine[0]["waiting_leases"]) == (16, 8, 16, 0, 1)
    other = [r for r in a100 if r["hidden"]][0]
    assert (other["project"], other["project_id"], other["in_use_gpus"]) == ("another project", None, 16)
    assert "nlp-lab" not in json.dumps(body)
    assert all(r["queued_charge"] is None for r in a100)   # the queued charge is off
    admin = ok(client.get("/v1/share?gpu_model=A100", headers=ADMIN))["share"]
    response_validator(document, "/v1/share", "get", 200).validate({"share": admin})
    assert {r["project"] for r in admin["projects"]} == {"ml-vision", "nlp-lab"}
    assert not any(r["hidden"] for r in admin["projects"])


def test_projects_of_one_rank_are_not_listed_to_a_member_in_the_order_of_their_ids(client):
    """Unnamed rows that tie were listed by project id, which told a member the ids' order."""
    for project, gpus in (("aaa-lab", 2), ("zzz-lab", 6)):   # unused, so both rank with ml-vision and nlp-lab
        ok(client.put(f"/v1/quotas/{project}", json={"quota": {"gpu_models": {"A100": {"gpus": gpus}}}},
                      headers=ADMIN))
    admin = ok(client.get("/v1/share?gpu_model=A100", headers=ADMIN))["share"]["projects"]
    assert len({r["rank"] for r in admin}) == 1 and [r["project"] for r in admin][:1] == ["aaa-lab"]
    rows = ok(client.get("/v1/share?gpu_model=A100", headers=VISION))["share"]["projects"]
    assert rows[0]["project"] == "ml-vision"
    others = [r["nominal_gpus"] for r in rows if r["hidden"]]
    assert others == sorted(others, reverse=True) and others[-1] == 2   # by figures: aaa-lab's 2 GPUs come last


@pytest.mark.parametrize("first, second", [("aaa-lab", "zzz-lab"), ("zzz-lab", "aaa-lab")])
def test_unnamed_rows_that_tie_on_some_figures_are_not_listed_in_the_order_of_their_ids(client, first, second):
    """The order above took some of a row's figures: rows that tied on those and differed only in
    another (what they may borrow, their weight) were still listed by project id."""
    for project, borrow, weight in ((first, 2, 1), (second, 6, 3)):   # unused: both rank with the demo's two
        ok(client.put(f"/v1/quotas/{project}", headers=ADMIN, json={"quota": {"gpu_models": {"A100": {
            "gpus": 4, "borrow_gpus": borrow, "weight": weight}}}}))
    rows = ok(client.get("/v1/share?gpu_model=A100", headers=VISION))["share"]["projects"]
    assert len({r["rank"] for r in rows}) == 1
    tied = [(r["borrow_gpus"], r["weight"]) for r in rows if r["hidden"] and r["nominal_gpus"] == 4]
    assert tied == [(6, 3.0), (2, 1.0)]   # by figures, whichever project id is the smaller


def test_decayed_use_and_weight_rank_projects_as_the_planner_starts_their_leases(client, engine_tick):
    """Three labs with different recent use and weights each queue a lease needing the whole
    A100 pool behind a blocker, in the opposite of their fair-share order: /v1/share's rank is
    the order they then start in, and not the order they were asked in or their raw use."""
    labs = ("lab-a", "lab-b", "lab-c")
    for project, weight in (("lab-a", 4.0), ("lab-b", 1.0), ("lab-c", 1.0), ("blocker", 1.0)):
        ok(client.put(f"/v1/quotas/{project}", json={"quota": {"gpu_models": {
            "A100": {"gpus": 32, "weight": weight}}}}, headers=ADMIN))
    who = {lab: headers(lab, "member") for lab in labs}
    ask(client, who["lab-a"], duration="PT2H")     # 16 GPU-hours, over weight 4: score 4
    ask(client, who["lab-b"], duration="PT1H")     # 8 GPU-hours, over weight 1: score 8; lab-c: none
    for _ in range(13):                            # both run and end
        engine_tick(600)
    ask(client, headers("blocker", "member"), instances=4, duration="PT1H")
    engine_tick()
    waiting = {lab: ask(client, who[lab], instances=4, duration="PT1H") for lab in ("lab-b", "lab-a", "lab-c")}
    assert all(lease["status"] == "queued" for lease in waiting.values())

    share = ok(client.get("/v1/share?gpu_model=A100", headers=ADMIN))["share"]["projects"]
    rank = {r["project"]: r["rank"] for r in share}
    used = {r["project"]: r["decayed_gpu_hours"] for r in share}
    assert used["lab-a"] > used["lab-b"] > used["lab-c"] == 0      # raw use alone would put lab-a last
    by_share = sorted(labs, key=lambda lab: rank[lab])
    assert by_share == ["lab-c", "lab-a", "lab-b"] and len({rank[lab] for lab in labs}) == 3
    queue = ok(client.get("/v1/queue?gpu_model=A100", headers=ADMIN))["queue"]["leases"]
    assert [e["project"] for e in queue] == by_share

    for _ in range(30):                            # the blocker ends; each lab's lease runs in turn
        engine_tick(600)
    starts = {lab: ok(client.get(f"/v1/leases/{lease['id']}", headers=who[lab]))["lease"]["start"]
              for lab, lease in waiting.items()}
    assert all(starts.values())
    assert sorted(labs, key=lambda lab: starts[lab]) == by_share


def test_share_is_made_at_most_once_per_engine_tick_and_per_replan(client, runtime, contended, monkeypatch):
    """The standings are made from all the planner's inputs (every project's recent allocations and
    the whole queue: 0.3 s of CPU at 1,000 waiting), and were made again on every call: a member
    reading /v1/share in a loop cost the service a plan's loading per call. Now once per engine
    tick and replan in each process; the answer's `now` says when, at most a tick ago."""
    from gpu_tenancy.engine import share as engine_share

    made = []
    real = engine_share.standings
    monkeypatch.setattr(engine_share, "standings", lambda *a, **kw: made.append(a[1]) or real(*a, **kw))
    tick, t0 = runtime.config.engine_tick_seconds, runtime.clock.now()
    first = ok(client.get("/v1/share", headers=VISION))["share"]
    runtime.clock.advance(tick - 1)
    again = ok(client.get("/v1/share?gpu_model=A100", headers=NLP))["share"]
    assert made == [t0] and again["now"] == first["now"] == rfc3339(t0)   # within the tick: made once
    # made once, shown to each caller as its own: nlp-lab sees its row named, ml-vision's not
    assert [r["project"] for r in again["projects"] if not r["hidden"]] == ["nlp-lab"]
    assert "ml-vision" not in json.dumps(again)
    runtime.clock.advance(1)
    later = ok(client.get("/v1/share", headers=VISION))["share"]
    assert made == [t0, t0 + tick] and later["now"] == rfc3339(t0 + tick)   # never older than a tick
    ask(client, VISION, name="vision-third")   # its create replans: the standings are made again at once
    after = ok(client.get("/v1/share?gpu_model=A100", headers=VISION))["share"]
    assert made == [t0, t0 + tick, t0 + tick]
    assert [r["waiting_leases"] for r in after["projects"] if not r["hidden"]] == [2]


def waiting_rows(sessions, rng, count: int) -> list[str]:
    """`count` waiting leases written straight to the database (the planner is not asked), each with
    random GPU model, project, status, position (ties and unplanned ones: None), second asked in
    (few, so that they tie) and arrival; their ids in the queue's order, told here from the values."""
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import utcnow_naive
    arrivals = rng.sample(range(1, 10 * count + 1), count)
    rows = []
    with sessions() as s:
        for i in range(count):
            model = rng.choice(["A100", "H100"])
            position = rng.choice([None, *range(1, count // 3 + 2)])
            created = utcnow_naive(T0 - rng.randrange(4))
            lease_id = f"{rng.getrandbits(64):016x}-{i}"
            s.add(m.Lease(id=lease_id, name=f"w{i}", project_id=rng.choice(["ml-vision", "nlp-lab"]),
                          user_id="u", status=rng.choice(["queued", "queued", "requested"]),
                          shape="a100.x1" if model == "A100" else "h100.x1", gpu_model=model, gpus_per_vm=1,
                          instances=1, duration=HOUR, earliest_start=created, priority=0, created_at=created,
                          updated_at=created, queue_position=position, queue_reasons=[], arrival=arrivals[i]))
            rows.append((model, position is None, position or 0, created, arrivals[i], lease_id))
        s.commit()
    return [r[-1] for r in sorted(rows)]


def walk(client, who, first: str, limit_of) -> list[dict]:
    """Every page of the queue from `first`, each asked with a page size of limit_of(); the entries in order."""
    limit = limit_of()
    entries, url = [], f"{first}{'&' if '?' in first else '?'}limit={limit}"
    for _ in range(1000):
        body = ok(client.get(url, headers=who))["queue"]
        assert len(body["leases"]) <= limit, "a page longer than the limit asked"
        entries += body["leases"]
        links = [link["href"] for link in body.get("leases_links", []) if link["rel"] == "next"]
        if not links:
            return entries
        assert len(body["leases"]) > 0, "a page with a next link and nothing on it"
        url = links[0].replace("http://localhost", "")
        limit = limit_of()
        url = re.sub(r"([?&])limit=[0-9]+", rf"\g<1>limit={limit}", url)
    raise AssertionError("the pages never ended")


@pytest.mark.parametrize("seed", range(6))
def test_walking_the_queues_pages_yields_every_waiting_lease_once_in_queue_order(client, sessions, runtime,
                                                                                 document, seed):
    """/v1/queue answered the whole queue at once (4.3 MB at 10,000 waiting): it is paged, and
    following the next links with any page sizes lists every waiting lease exactly once, in the
    queue's order (positions tie and some are not planned yet; leases asked in one second tie)."""
    rng = random.Random(seed)
    runtime.config.max_page_size = 50
    expected = waiting_rows(sessions, rng, rng.randrange(20, 120))
    validate = response_validator(document, "/v1/queue", "get", 200).validate
    for who in (ADMIN, VISION):
        entries = walk(client, who, "/v1/queue", lambda: rng.randrange(1, 51))
        shown = [e for e in entries if not e["hidden"]]
        if who is ADMIN:
            assert [e["lease_id"] for e in entries] == expected
        else:   # a member: the same order, its own named, the others not
            assert len(entries) == len(expected)
            assert [e["lease_id"] for e in shown] == [i for i in expected if i in {e["lease_id"] for e in shown}]
            assert all(e["lease_id"] is None for e in entries if e["hidden"])
    for model in ("A100", "H100"):
        entries = walk(client, ADMIN, f"/v1/queue?gpu_model={model}", lambda: rng.randrange(1, 51))
        assert [e["lease_id"] for e in entries] == [i for i in expected if i in {e["lease_id"] for e in entries}]
        assert {e["gpu_model"] for e in entries} <= {model}
    # a page's answer is the document's, with and without the next link; the default page and its bound
    validate(ok(client.get("/v1/queue?limit=1", headers=VISION)))
    validate(ok(client.get("/v1/queue?limit=50", headers=VISION)))
    # the default page: the API's 100, here cut to the operator's max_page_size
    assert len(ok(client.get("/v1/queue", headers=ADMIN))["queue"]["leases"]) == min(50, len(expected))


def test_the_queue_page_size_is_bounded_and_a_bad_marker_is_a_clear_400(client, runtime, contended):
    runtime.config.max_page_size = 10
    for query, code in (({"limit": "11"}, "gpu_tenancy.invalid_query"), ({"limit": "0"}, "gpu_tenancy.invalid_query"),
                        ({"marker": "not-a-marker"}, "gpu_tenancy.invalid_marker"),
                        ({"marker": "A100~0~1~1~" + "9" * 40}, "gpu_tenancy.invalid_marker")):
        reply = client.get("/v1/queue", query_string=query, headers=VISION)
        assert reply.status_code == 400, (query, reply.get_json())
        assert reply.get_json()["errors"][0]["code"] == code
    body = ok(client.get("/v1/queue?limit=1", headers=VISION))["queue"]
    assert len(body["leases"]) == 1 and body["leases_links"][0]["rel"] == "next"
    rest = ok(client.get(body["leases_links"][0]["href"], headers=VISION))["queue"]
    assert len(rest["leases"]) == 1 and "leases_links" not in rest
    assert rest["leases"][0]["position"] == 2


def test_a_queue_marker_names_no_lease_and_outlives_the_lease_it_ended_at(client, clock):
    """The next link of a member's page that ends at another project's lease carries neither that
    lease's id (the entry hides it) nor any sequence of the cloud's; and once the lease it ended at
    has gone (the queue replanned: the others moved up), the next page starts at the lease after it."""
    for who in (VISION, NLP):
        assert ask(client, who, instances=2, duration="PT2H")["status"] == "scheduled"
    waiting = []
    for i, who in enumerate((NLP, VISION, NLP)):
        clock.advance(1)
        waiting.append(ask(client, who, name=f"w{i}"))
    body = ok(client.get("/v1/queue?limit=1", headers=VISION))["queue"]
    link = body["leases_links"][0]["href"]
    assert body["leases"][0]["hidden"] and body["leases"][0]["position"] == 1
    assert not any(lease["id"] in link for lease in waiting)
    assert client.delete(f"/v1/leases/{waiting[0]['id']}", headers=ADMIN).status_code == 204
    rest = ok(client.get(link.replace("limit=1", "limit=10"), headers=ADMIN))["queue"]["leases"]
    assert [e["lease_id"] for e in rest] == [waiting[1]["id"], waiting[2]["id"]]
    assert [e["position"] for e in rest] == [1, 2]   # moved up by the replan


def test_a_lease_fitted_into_the_plan_is_counted_by_the_next_share(client, runtime, contended):
    """With a long queue a create is fitted into the plan (engine/plan_insert.py), and a cancel
    takes its lease out of it (engine/plan_remove.py): neither replans. The standings made before
    were kept (keyed by the replans alone), and the project's member read, the same second, a
    share without the lease just made, then with the lease just cancelled."""
    runtime.fits.min_waiting = 0   # (as a queue of plan_insert_min_waiting leases does)
    before = ok(client.get("/v1/share?gpu_model=A100", headers=VISION))["share"]
    made = ask(client, VISION, name="vision-fitted")
    assert made["status"] == "queued"
    after = ok(client.get("/v1/share?gpu_model=A100", headers=VISION))["share"]
    assert client.delete(f"/v1/leases/{made['id']}", headers=VISION).status_code == 204
    cancelled = ok(client.get("/v1/share?gpu_model=A100", headers=VISION))["share"]
    assert after["now"] == before["now"] == cancelled["now"]   # the same second
    assert [r["waiting_leases"] for r in (before, after, cancelled) for r in r["projects"] if not r["hidden"]] \
        == [1, 2, 1]

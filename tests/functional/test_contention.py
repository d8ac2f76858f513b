"""Two projects contend on the simulated cloud in virtual time: ml-vision borrows
beyond its quota while GPUs are idle; nlp-lab, within its quota, asks for GPUs
the borrower holds; the engine reclaims them with notice, and every figure
matches the hand calculation below.

Demo cloud: 4 hosts x 8 A100. ml-vision: 16 A100 + 8 borrowable; nlp-lab: 16.
Engine defaults: reclaim after a wait of 1 h, 15 minutes' notice, 1 h minimum runtime.

  08:00  ml-vision: "base", 2 x a100.x8 for 10 h (16, its quota)     -> runs 08:00-18:00
  08:00  ml-vision: "extra", a100.x8 for 10 h (8 more: borrowing)     -> runs from 08:00
  10:00  nlp-lab: "train", 2 x a100.x8 for 4 h (16, its quota). 8 are free; it would wait
         until 18:00 (8 h > 1 h) for GPUs a borrower holds, and "extra" has run 2 h (> 1 h):
         "extra" is warned at 10:00 and ends at 10:15.
  10:15  "extra" ends; the cloud frees its GPUs 5 s later (delete_seconds), and it is preempted
  10:15:05  "train" starts, for 4 h: until 14:15:05
  GPU-hours by 20:00:  ml-vision = base 16 x 10 + extra 8 x 2.25 = 160 + 18 = 178
                       nlp-lab   = train 16 x 4                  = 64
  nlp-lab's December budget of 100: 64 used, 36 left; a further 16 x 3 h (48) is refused.
"""
from __future__ import annotations

import json

from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine import budgets
from gpu_tenancy.engine.early_ends import yielded_pairs
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import RELEASE, T0, headers

HOUR = 3600
VISION, NLP = headers("ml-vision"), headers("nlp-lab")
ADMIN = headers("ml-vision", "admin", user="ops")


def test_two_projects_contend_and_the_borrowed_gpus_are_reclaimed(client, runtime, engine_tick, cloud):
    clock = runtime.clock

    def tick_to(t: int, step: int = 300) -> None:
        while clock.now() < t:
            engine_tick(advance=min(step, t - clock.now()))

    def lease(lease_id, who):
        return client.get(f"/v1/leases/{lease_id}", headers=who).get_json()["lease"]

    def story(lease_id, who):
        events = client.get(f"/v1/leases/{lease_id}/events", headers=who).get_json()["events"]
        return [(e["at"][11:19], e["kind"], e["to"], e["message"]) for e in events]

    budget = client.post("/v1/budgets", json={"budget": {"project_id": "nlp-lab", "gpu_model": "A100",
                                                         "gpu_hours": 100, "period": "month"}}, headers=ADMIN)
    assert budget.status_code == 201
    base = client.post("/v1/leases", json={"name": "base", "shape": "a100.x8", "instances": 2, "duration": "PT10H"},
                       headers=VISION).get_json()["lease"]
    extra = client.post("/v1/leases", json={"name": "extra", "shape": "a100.x8", "duration": "PT10H",
                                            "volume": {"size_gb": 20}}, headers=VISION).get_json()["lease"]
    assert (base["borrowing"], extra["borrowing"]) == (False, True)
    engine_tick()
    tick_to(T0 + 2 * HOUR)

    train = client.post("/v1/leases", json={"name": "train", "shape": "a100.x8", "instances": 2,
                                            "duration": "PT4H"}, headers=NLP).get_json()["lease"]
    # the create's replan is the engine's: the reclaim is decided as it is asked for, and the answer tells it
    assert train["status"] == "queued" and train["queue"]["eta"] == rfc3339(T0 + 2 * HOUR + 900 + RELEASE)
    print("\n10:00 queue reasons as asked:", *(r["message"] for r in train["queue"]["reasons"]), sep="\n  ")
    engine_tick()                                                     # 10:00: the engine's pass agrees
    warned = lease(extra["id"], VISION)
    assert warned["status"] == "active" and warned["end"] == rfc3339(T0 + 2 * HOUR + 900)
    assert warned["early_end"]["kind"] == "reclaimed" and warned["early_end"]["for_lease"] is None   # nlp-lab's
    assert lease(extra["id"], ADMIN)["early_end"]["for_lease"] == train["id"]                   # (to operators)
    waiting = lease(train["id"], NLP)
    assert waiting["queue"]["eta"] == rfc3339(T0 + 2 * HOUR + 900 + RELEASE)   # when it really starts
    said = {"code": "reclaim", "message": "another project is borrowing 8 A100; "
                                          "reclaimed for this lease, they are free at 2026-12-01T10:15:00Z"}
    assert said in waiting["queue"]["reasons"]
    print("10:00 queue reasons after the engine's pass:", *(r["message"] for r in waiting["queue"]["reasons"]),
          sep="\n  ")

    # neither member is told the other project or its lease (as /v1/share names no other project)
    for own, other, who in ((train, (extra, base), NLP), (extra, (train,), VISION)):
        seen = json.dumps([lease(own["id"], who), story(own["id"], who)])
        assert not any(x["id"] in seen or x["project_id"] in seen for x in other), seen
    engine_tick(advance=300)                                          # 10:05: still said on the next tick
    assert said in lease(train["id"], NLP)["queue"]["reasons"]
    tick_to(T0 + 2 * HOUR + 900)                                      # 10:15: notice over
    assert lease(extra["id"], VISION)["status"] == "ending"
    engine_tick(advance=5)                                            # 10:15:05: GPUs released
    assert lease(extra["id"], VISION)["status"] == "preempted"
    started = lease(train["id"], NLP)
    assert started["start"] == rfc3339(T0 + 2 * HOUR + 905) and started["end"] == rfc3339(T0 + 6 * HOUR + 905)
    with session_scope(runtime.sessions) as session:
        assert yielded_pairs(session) == {("ml-vision", "nlp-lab")}

    tick_to(T0 + 6 * HOUR + 905)                                      # 14:15:05: train ends on time
    tick_to(T0 + 10 * HOUR)                                           # 18:00: base ends on time
    tick_to(T0 + 12 * HOUR)
    assert [lease(x["id"], who)["status"] for x, who in ((base, VISION), (extra, VISION), (train, NLP))] == [
        "ended", "preempted", "ended"]
    usage = client.get(f"/v1/usage?start={rfc3339(T0)}&end={rfc3339(T0 + 12 * HOUR)}",
                       headers=ADMIN).get_json()["usage"]["projects"]
    hours = {u["project_id"]: u["gpu_models"]["A100"]["gpu_hours"] for u in usage}
    assert hours == {"ml-vision": 178.0, "nlp-lab": 64.0}
    current = {u["project_id"]: u["budgets"] for u in usage}["nlp-lab"][0]["current"]
    assert (current["used"], current["planned"], current["left"]) == (64.0, 0.0, 36.0)
    refused = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT3H"}, headers=NLP)
    assert refused.status_code == 403
    assert refused.get_json()["errors"][0]["detail"] == (
        "refused for budget: it needs 48 A100 GPU-hours in December 2026; project nlp-lab's budget there is 100: "
        "64 used, 0 planned, 36 left")

    told = story(extra["id"], VISION)
    assert told[-3:] == [
        ("10:00:00", "warning", None,
         "reclaimed: this lease borrows 8 A100 GPUs beyond its project's quota of 16, and a lease "
         "of another project, within its own quota, would otherwise wait; it ends at "
         "2026-12-01T10:15:00Z, after a notice of 15 minutes, instead of 2026-12-01T18:00:00Z; its data volume is kept"),
        ("10:15:00", "transition", "ending", "reclaimed for another lease: its notice is over"),
        ("10:15:05", "transition", "preempted", "VMs deleted, GPUs released; the data volume is kept"),
    ]
    kept = [v for v in cloud.volumes().values() if v["lease_id"] == extra["id"]]
    assert [v["status"] for v in kept] == ["available"]
    assert ("10:00:00", "reclaim", None,
            "1 lease(s) holding 8 A100 GPUs end at 2026-12-01T10:15:00Z to make room; it would "
            "otherwise have waited until 2026-12-01T18:00:05Z") in story(train["id"], NLP)   # and the release
    assert cloud.servers() == {}
    print("\n".join(f"{at} {kind:<10} {to or '':<12} {msg}" for lease_id, who in ((extra["id"], VISION),
                                                                                 (train["id"], NLP))
                    for at, kind, to, msg in story(lease_id, who)))


def test_a_young_borrower_is_reclaimed_once_it_has_run_its_minimum(client, runtime, engine_tick):
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=VISION)
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=VISION).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30 * 60)                                      # 08:30
    train = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                        headers=NLP).get_json()["lease"]
    engine_tick()
    reasons = client.get(f"/v1/leases/{train['id']}", headers=NLP).get_json()["lease"]["queue"]["reasons"]
    assert {"code": "borrowing", "message": "another project is borrowing 8 A100 until 2026-12-01T18:00:00Z; "
                                            "reclaim after 2026-12-01T09:00:00Z (its minimum runtime of 1 hour)"
            } in reasons
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["early_end"] is None
    engine_tick(advance=30 * 60)                                      # 09:00: now it may be taken
    taken = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert taken["early_end"]["at"] == "2026-12-01T09:15:00Z" and taken["end"] == "2026-12-01T09:15:00Z"


def test_a_borrower_whose_project_is_back_within_its_quota_is_not_reclaimed(client, engine_tick):
    """"extra" started beyond ml-vision's 16 (borrowing), but "base", which made it borrow, ended:
    ml-vision holds 8 of its 16 now, borrows nothing (as /v1/share says), and a lease of another
    project within its quota does not take them from it."""
    ok = client.put("/v1/quotas/third-lab", json={"quota": {"gpu_models": {"A100": {"gpus": 16}}}}, headers=ADMIN)
    assert ok.status_code == 200
    base = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT2H"},
                       headers=VISION).get_json()["lease"]
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=VISION).get_json()["lease"]
    assert extra["borrowing"]
    engine_tick()
    engine_tick(advance=60)
    assert client.delete(f"/v1/leases/{base['id']}", headers=VISION).status_code == 204
    engine_tick(advance=RELEASE)
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=NLP)
    engine_tick(advance=60)
    share = client.get("/v1/share?gpu_model=A100", headers=ADMIN).get_json()["share"]["projects"]
    assert [(row["in_use_gpus"], row["borrowed_gpus"]) for row in share if row["project_id"] == "ml-vision"] == [(8, 0)]
    # third-lab's 16, within its quota, wait: 8 are free, 8 are ml-vision's and 16 nlp-lab's, all within quota
    third = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                        headers=headers("third-lab")).get_json()["lease"]
    engine_tick(advance=2 * HOUR)                                     # past the minimum runtime and the wait
    engine_tick(advance=60)
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["early_end"] is None
    waiting = client.get(f"/v1/leases/{third['id']}", headers=headers("third-lab")).get_json()["lease"]
    assert waiting["status"] == "queued" and not any(r["code"] in ("borrowing", "reclaim")
                                                     for r in waiting["queue"]["reasons"])


def test_a_preemptible_lease_is_ended_with_notice_for_a_normal_one(client, engine_tick):
    pre = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 4, "duration": "PT8H",
                                          "priority_class": "preemptible"}, headers=NLP).get_json()["lease"]
    assert pre["status"] == "scheduled"                              # the whole cloud, beyond nlp-lab's 16
    engine_tick()
    engine_tick(advance=5 * 60)                                       # 08:05: it runs
    normal = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H"},
                         headers=VISION).get_json()["lease"]
    assert normal["queue"]["eta"] == "2026-12-01T08:20:05Z"   # preempted as it is asked for: no minimum runtime
    engine_tick()
    shown = client.get(f"/v1/leases/{pre['id']}", headers=NLP).get_json()["lease"]
    assert shown["early_end"]["kind"] == "preempted" and shown["end"] == "2026-12-01T08:20:00Z"
    events = client.get(f"/v1/leases/{pre['id']}/events", headers=NLP).get_json()["events"]
    assert events[-1]["kind"] == "warning" and events[-1]["message"].startswith(
        "preempted: a lease of another project needs 8 A100 GPUs, and this preemptible lease's 32 "
        "stand in its way; it ends at 2026-12-01T08:20:00Z, after a notice of 15 minutes,")
    engine_tick(advance=15 * 60)
    engine_tick(advance=5)
    assert client.get(f"/v1/leases/{pre['id']}", headers=NLP).get_json()["lease"]["status"] == "preempted"
    started = client.get(f"/v1/leases/{normal['id']}", headers=VISION).get_json()["lease"]
    assert started["status"] in ("provisioning", "active") and started["start"] == "2026-12-01T08:20:05Z"


def borrower_under_notice(client, engine_tick) -> tuple[dict, dict]:
    """ml-vision's "extra" borrows 8 A100 beyond its 16 from 08:00; at 10:00 nlp-lab's "train"
    asks for 16 and "extra" is noticed to end at 10:15 for it."""
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=VISION)
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=VISION).get_json()["lease"]
    engine_tick()
    engine_tick(advance=2 * HOUR)
    train = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"},
                        headers=NLP).get_json()["lease"]
    engine_tick()
    return extra, train


def test_a_reclaim_is_called_off_when_the_lease_it_served_is_cancelled(client, engine_tick):
    extra, train = borrower_under_notice(client, engine_tick)
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["end"] == \
        "2026-12-01T10:15:00Z"
    assert client.delete(f"/v1/leases/{train['id']}", headers=NLP).status_code == 204
    engine_tick(advance=5 * 60)
    kept = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert (kept["status"], kept["end"], kept["early_end"]) == ("active", "2026-12-01T18:00:00Z", None)
    events = client.get(f"/v1/leases/{extra['id']}/events", headers=VISION).get_json()["events"]
    assert events[-1]["message"] == ("no longer reclaimed: the lease it was to make room for "
                                     "is gone; it ends at 2026-12-01T18:00:00Z again")
    engine_tick(advance=15 * 60)
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["status"] == "active"


def test_a_lease_shrunk_under_notice_keeps_its_shorter_end_when_the_notice_is_called_off(client, engine_tick):
    """"extra", under notice to end at 10:15, is shrunk by its tenant to 10:10; "train", which it
    was reclaimed for, is cancelled: the call-off gives it back the end its tenant asked last,
    not the 18:00 it had before (8 more hours of borrowed GPUs nobody asked for)."""
    extra, train = borrower_under_notice(client, engine_tick)
    shrunk = client.patch(f"/v1/leases/{extra['id']}", json={"end": "2026-12-01T10:10:00Z", "shrink": True},
                          headers=VISION)
    assert shrunk.status_code == 200 and shrunk.get_json()["lease"]["end"] == "2026-12-01T10:10:00Z"
    assert client.delete(f"/v1/leases/{train['id']}", headers=NLP).status_code == 204
    engine_tick(advance=60)
    kept = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert (kept["status"], kept["end"], kept["early_end"]) == ("active", "2026-12-01T10:10:00Z", None)
    assert [a["end"] for a in kept["allocations"]] == ["2026-12-01T10:10:00Z"]


def test_a_reclaim_is_called_off_when_the_lease_it_served_starts_on_other_gpus(client, engine_tick):
    """The lease a borrower was reclaimed for starts elsewhere before the notice is over (another
    lease of its project ended early): the borrower gets its own end back, as when it is cancelled."""
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=VISION)
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=VISION).get_json()["lease"]
    other = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H"}, headers=NLP).get_json()["lease"]
    engine_tick()                                                     # the cloud is full: 16 + 8 + 8
    engine_tick(advance=2 * HOUR)                                     # 10:00
    train = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H"}, headers=NLP).get_json()["lease"]
    engine_tick()   # train would wait for "other" until 12:00, 2 h: "extra" borrows, and is reclaimed
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["end"] == \
        "2026-12-01T10:15:00Z"
    engine_tick(advance=5 * 60)                                       # 10:05
    assert client.delete(f"/v1/leases/{other['id']}", headers=NLP).status_code == 204
    engine_tick(advance=10)                                           # "other"'s GPUs are back
    engine_tick(advance=10)   # "train" starts on them, and the pass that started it calls the reclaim off
    started = client.get(f"/v1/leases/{train['id']}", headers=NLP).get_json()["lease"]
    assert started["status"] in ("scheduled", "provisioning", "active") and started["start"] < "2026-12-01T10:15"
    kept = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert (kept["status"], kept["end"], kept["early_end"]) == ("active", "2026-12-01T18:00:00Z", None)
    events = client.get(f"/v1/leases/{extra['id']}/events", headers=VISION).get_json()["events"]
    assert events[-1]["message"] == ("no longer reclaimed: the lease it was to make room for "
                                     "has GPUs elsewhere; it ends at 2026-12-01T18:00:00Z again")
    engine_tick(advance=15 * 60)                                      # past the notice it was given
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["status"] == "active"
    with session_scope(client.application.extensions["gpu_tenancy"].sessions) as session:
        assert yielded_pairs(session) == frozenset()   # nothing was yielded: ml-vision may reclaim from nlp-lab


def test_a_reclaim_whose_gpus_are_planned_again_stands_when_its_lease_starts_elsewhere(client, engine_tick):
    """As above, but a lease asked for before it starts is planned on the noticed GPUs at the
    notice's end: giving the borrower its end back would delay it, so the notice stands."""
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"}, headers=VISION)
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=VISION).get_json()["lease"]
    other = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H"}, headers=NLP).get_json()["lease"]
    engine_tick()
    engine_tick(advance=2 * HOUR)                                     # 10:00
    train = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT4H"}, headers=NLP).get_json()["lease"]
    engine_tick()
    engine_tick(advance=5 * 60)                                       # 10:05
    assert client.delete(f"/v1/leases/{other['id']}", headers=NLP).status_code == 204
    more = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT1H"}, headers=NLP).get_json()["lease"]
    assert "2026-12-01T10:15:00Z" < more["queue"]["eta"] < "2026-12-01T10:16"   # on the GPUs "extra" gives back
    engine_tick(advance=10)
    engine_tick(advance=10)
    assert client.get(f"/v1/leases/{train['id']}", headers=NLP).get_json()["lease"]["status"] != "queued"
    engine_tick(advance=10)
    cut = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert (cut["end"], cut["early_end"]["at"]) == ("2026-12-01T10:15:00Z", "2026-12-01T10:15:00Z")


def test_a_borrower_its_owner_ends_before_its_notice_ends_ended_not_preempted(client, engine_tick):
    """Under a reclaim notice, its owner deletes it at once (its work saved): the owner ended it,
    not the reclaim, which it never reached. It finished `preempted` all the same, told as a
    preemption for the other lease on the message bus."""
    base = client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT10H"},
                       headers=VISION).get_json()["lease"]
    extra = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT10H"},
                        headers=VISION).get_json()["lease"]
    engine_tick()
    engine_tick(advance=2 * HOUR)
    client.post("/v1/leases", json={"shape": "a100.x8", "instances": 2, "duration": "PT4H"}, headers=NLP)
    engine_tick()
    noticed = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert noticed["early_end"]["kind"] == "reclaimed", noticed
    assert client.delete(f"/v1/leases/{extra['id']}", headers=VISION).status_code == 204
    engine_tick(advance=10)
    engine_tick(advance=10)
    ended = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert ended["status"] == "ended", ended["status"]
    assert client.get(f"/v1/leases/{base['id']}", headers=VISION).get_json()["lease"]["status"] == "active"


def test_a_reclaim_called_off_gives_back_no_hours_the_budget_has_spent_since(client, runtime, engine_tick):
    """ml-vision's December budget is 200 A100 GPU-hours. Its "extra" is noticed to end at 10:15
    (base 160 + extra 18 = 178 then); the 22 hours left are spent on a reservation for tomorrow
    (16, checked and granted). "train" is cancelled: the call-off would give "extra" its 18:00 back,
    62 more hours, 256 in all: past the budget no create or extension may pass. The notice stands."""
    extra, train = borrower_under_notice(client, engine_tick)
    budget = client.post("/v1/budgets", json={"budget": {"project_id": "ml-vision", "gpu_model": "A100",
                                                         "gpu_hours": 200, "period": "month"}}, headers=ADMIN)
    assert budget.status_code == 201, budget.get_json()
    tomorrow = client.post("/v1/leases", json={"shape": "a100.x8", "duration": "PT2H",
                                               "start": "2026-12-02T08:00:00Z"}, headers=VISION)
    assert tomorrow.status_code == 201, tomorrow.get_json()
    assert client.delete(f"/v1/leases/{train['id']}", headers=NLP).status_code == 204
    engine_tick(advance=60)
    kept = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert kept["end"] == "2026-12-01T10:15:00Z", kept["end"]
    with session_scope(runtime.sessions) as session:
        [(row, use)] = budgets.current_uses(session, runtime.clock.now(), "ml-vision")["ml-vision"]
        assert use is not None and use.left >= 0, (use.used, use.planned, use.left)
    engine_tick(advance=15 * 60)
    engine_tick(advance=10)
    assert client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]["status"] == "preempted"


def test_a_reclaim_called_off_within_the_budget_gives_the_end_back(client, runtime, engine_tick):
    """As above with a budget that has room for the end given back (178 + 62 = 240): called off."""
    extra, train = borrower_under_notice(client, engine_tick)
    assert client.post("/v1/budgets", json={"budget": {"project_id": "ml-vision", "gpu_model": "A100",
                                                       "gpu_hours": 240, "period": "month"}},
                       headers=ADMIN).status_code == 201
    assert client.delete(f"/v1/leases/{train['id']}", headers=NLP).status_code == 204
    engine_tick(advance=60)
    kept = client.get(f"/v1/leases/{extra['id']}", headers=VISION).get_json()["lease"]
    assert (kept["end"], kept["early_end"]) == ("2026-12-01T18:00:00Z", None)

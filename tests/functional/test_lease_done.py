"""POST /v1/leases/{id}/done: a running lease ends when its work does, from its VM with
the lease's secret (gpu-done) or by a member with a token, and its GPUs go to the queue."""
from __future__ import annotations

import pytest

from gpu_tenancy.config import Config
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       readiness_url="http://127.0.0.1:8779")


def active(client, engine_tick, project="ml-vision", shape="h100.x4", probe=True):
    made = client.post("/v1/leases", json={"shape": shape, "duration": "PT4H", "readiness_probe": probe},
                       headers=headers(project)).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    lease = client.get(f"/v1/leases/{made['id']}", headers=headers(project)).get_json()["lease"]
    assert lease["status"] == "active"
    return made["id"], (made["readiness"] or {}).get("token")


def status(client, lease_id, project="ml-vision"):
    return client.get(f"/v1/leases/{lease_id}", headers=headers(project)).get_json()["lease"]["status"]


def test_done_from_the_vm_ends_the_lease_and_its_gpus_go_to_the_waiting_lease(client, engine_tick):
    first, token = active(client, engine_tick, "nlp-lab")
    active(client, engine_tick, "ml-vision")          # every H100 is held now
    waiting = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT1H"},
                          headers=headers("nlp-lab")).get_json()["lease"]
    engine_tick()
    assert status(client, waiting["id"], "nlp-lab") == "queued"
    answer = client.post(f"/v1/leases/{first}/done", json={"instance": 0, "detail": "exit 0"},
                         headers={"X-Lease-Token": token})
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["lease"]["status"] == "ending"
    engine_tick(advance=10)
    engine_tick(advance=10)
    assert status(client, first, "nlp-lab") == "ended"
    engine_tick(advance=10)
    assert status(client, waiting["id"], "nlp-lab") in ("scheduled", "provisioning", "active")
    events = client.get(f"/v1/leases/{first}/events", headers=headers("nlp-lab")).get_json()["events"]
    ending = next(e for e in events if e["to"] == "ending")
    assert (ending["actor"], ending["message"]) == ("guest", "the work is done, said VM 0: exit 0")


def test_a_member_may_say_done_with_a_token_and_an_empty_body(client, engine_tick):
    lease, _ = active(client, engine_tick, probe=False)
    answer = client.post(f"/v1/leases/{lease}/done", headers=headers())
    assert answer.status_code == 200
    assert answer.get_json()["lease"]["status"] == "ending"
    again = client.post(f"/v1/leases/{lease}/done", headers=headers())
    assert again.status_code == 409 and again.get_json()["errors"][0]["code"] == "gpu_tenancy.lease_not_running"


def test_who_may_not_say_done(client, engine_tick):
    lease, token = active(client, engine_tick)
    url = f"/v1/leases/{lease}/done"
    assert client.post(url).status_code == 401
    assert client.post(url, headers={"X-Lease-Token": token + "x"}).status_code == 404   # as an unknown lease
    assert client.post(url, headers=headers(roles="reader")).status_code == 403
    assert client.post(url, headers=headers("nlp-lab")).status_code == 404   # another project's lease
    assert client.post("/v1/leases/nope/done", headers={"X-Lease-Token": token}).status_code == 404
    # another lease's secret is no secret of this one
    other, other_token = active(client, engine_tick, "nlp-lab")
    assert client.post(url, headers={"X-Lease-Token": other_token}).status_code == 404
    assert status(client, lease) == "active"


@pytest.mark.parametrize("body", [{"instance": -1}, {"instance": 1000}, {"detail": "x" * 1025},
                                  {"instance": 0, "extra": 1}, [], {"detail": 5}])
def test_bad_bodies_are_refused_and_change_nothing(client, engine_tick, body):
    lease, token = active(client, engine_tick)
    answer = client.post(f"/v1/leases/{lease}/done", json=body, headers={"X-Lease-Token": token})
    assert answer.status_code == 400
    assert status(client, lease) == "active"


CONTROLS = ["exit 0\x1b]52;c;cm0gLXJmIH4=\x07", "exit 0\nthe work is done, said the admin", "exit\x7f",
            "exit\x9b2J", "evil\u202egnp.exe", "two\u2028lines"]


@pytest.mark.parametrize("detail", CONTROLS)
def test_a_detail_with_a_control_character_is_refused_and_ends_nothing(client, engine_tick, detail):
    """The detail goes into the lease's events, which the dashboard, the API's readers and the
    admin exports show as they are: what a lease's name may not hold, its VM may not write there
    (an OSC 52 escape writes a reader's clipboard, a newline forges another line of events)."""
    lease, token = active(client, engine_tick)
    answer = client.post(f"/v1/leases/{lease}/done", json={"instance": 0, "detail": detail},
                         headers={"X-Lease-Token": token})
    assert answer.status_code == 400, answer.get_json()
    error = answer.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.invalid_input" and "detail" in error["detail"]
    assert status(client, lease) == "active"
    events = client.get(f"/v1/leases/{lease}/events", headers=headers()).get_json()["events"]
    assert not any("work is done" in e["message"] for e in events)
    answer = client.post(f"/v1/leases/{lease}/done", json={"instance": 0, "detail": "exit 0 – fini, 学習 done"},
                         headers={"X-Lease-Token": token})
    assert answer.status_code == 200, answer.get_json()


def test_a_waiting_lease_is_not_done(client, runtime):
    start = rfc3339(runtime.clock.now() + 86400)
    made = client.post("/v1/leases", json={"shape": "h100.x4", "duration": "PT1H", "start": start},
                       headers=headers()).get_json()["lease"]
    answer = client.post(f"/v1/leases/{made['id']}/done", headers=headers())
    assert answer.status_code == 409
    assert answer.get_json()["errors"][0]["code"] == "gpu_tenancy.lease_not_running"


def test_a_wrong_lease_secret_is_refused_whoever_sends_it(client, engine_tick):
    """A member adding a secret that is not the lease's would pass as the member and be told as
    the VM ("said the VM", actor guest): refused, and the lease runs on."""
    lease, _ = active(client, engine_tick)
    answer = client.post(f"/v1/leases/{lease}/done",
                         headers={**headers(user="mallory"), "X-Lease-Token": "not-the-lease-secret"})
    assert answer.status_code == 403, answer.get_json()
    assert status(client, lease) == "active"


@pytest.mark.parametrize("by_vm", [True, False])
def test_done_leaves_an_audit_record_of_who_said_it(client, engine_tick, by_vm):
    lease, token = active(client, engine_tick)
    sender = {"X-Lease-Token": token} if by_vm else headers(user="mallory")
    assert client.post(f"/v1/leases/{lease}/done", headers=sender).status_code == 200
    records = client.get("/v1/audit", query_string={"target_id": lease}, headers=headers("ops", "admin", "ops")
                         ).get_json()["audit_records"]
    done = [r for r in records if r["action"] == "lease.done"]
    assert len(done) == 1 and done[0]["user_id"] == (None if by_vm else "mallory"), records
    assert (done[0]["before"]["status"], done[0]["after"]["status"]) == ("active", "ending")


def test_the_body_is_read_once_the_sender_is_known(client, engine_tick):
    """The body was read before the secret (or the token) was checked: anyone who could reach
    the port, with any X-Lease-Token, had the service parse and walk a body of up to 1 MiB (a
    flat array of numbers: a third of a second of a worker's CPU each)."""
    lease, _ = active(client, engine_tick)
    flat = "[" + ",".join(["0"] * 300_000) + "]"
    for url, sender, refused in ((f"/v1/leases/{lease}/done", {"X-Lease-Token": "guess"}, 404),
                                 ("/v1/leases/00000000-0000-0000-0000-000000000000/done", {"X-Lease-Token": "guess"},
                                  404),
                                 (f"/v1/leases/{lease}/done", headers("nlp-lab"), 404),
                                 (f"/v1/leases/{lease}/done", headers(roles="reader"), 403)):
        answer = client.post(url, data=flat, content_type="application/json", headers=sender)
        assert answer.status_code == refused, (url, sender, answer.get_json())
    assert status(client, lease) == "active"

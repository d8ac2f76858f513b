"""The before-end warning: at a configurable lead time, an event on the lease
and a POST to the project's webhook, signed with the project's secret and
retried until the receiver takes it; the user can then extend within the rules."""
from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine.lifecycle import Lifecycle
from gpu_tenancy.engine.runner import EngineRunner
from tests.conftest import headers

LEAD = 600


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers with `codes` in turn (then 200)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.codes: list[int] = []
        self.location: str | None = None   # sent with a 3xx code
        self.seen: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.seen.append((self.headers, body))   # case-insensitive names
                self.send_response(receiver.codes.pop(0) if receiver.codes else 200)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_port}/hooks/gpu"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def engine_tick(engine_tick, runtime):
    """conftest's tick, then a pass of the outbox worker, waited for (the tick itself sends nothing)."""
    base = engine_tick

    def tick(advance: int = 0):
        base(advance)
        runtime.engine.outbox.run_once()
        assert runtime.engine.outbox.wait(30)
    return tick


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def hooked(client, runtime, receiver):
    runtime.config.warn_before_end_seconds = LEAD
    runtime.config.webhook_allowed_networks = ["127.0.0.0/8"]   # the receiver is on loopback
    reply = client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": receiver.url}}, headers=headers())
    assert reply.status_code == 200, reply.get_json()
    return reply.get_json()["webhook"]["secret"]


def active_lease(client, engine_tick, duration="PT1H"):
    lease = client.post("/v1/leases", json={"shape": "a100.x1", "duration": duration},
                        headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    lease = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]
    assert lease["status"] == "active"
    return lease


def warnings(client, lease):
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    return [e for e in events if e["kind"] == "warning"]


def verify(secret, seen):
    head, body = seen
    expected = "sha256=" + hmac.new(secret.encode(), f"{head['X-GPU-Tenancy-Timestamp']}.".encode() + body,
                                    hashlib.sha256).hexdigest()
    return hmac.compare_digest(head["X-GPU-Tenancy-Signature"], expected)


def test_the_warning_comes_at_the_configured_lead_time_as_event_and_signed_webhook(
        client, runtime, receiver, hooked, engine_tick):
    lease = active_lease(client, engine_tick)
    end = runtime.clock.now() + 3600 - 30
    runtime.clock.set(end - LEAD - 5)
    engine_tick()
    assert warnings(client, lease) == [] and receiver.seen == []          # not before the lead time
    engine_tick(advance=10)
    [warning] = warnings(client, lease)
    assert lease["end"] in warning["message"]
    [seen] = receiver.seen
    body = json.loads(seen[1])
    assert body["event"] == "lease.ending_soon" and body["lease"]["id"] == lease["id"]
    assert body["lease"]["end"] == lease["end"] and seen[0]["X-GPU-Tenancy-Event"] == "lease.ending_soon"
    assert verify(hooked, seen)
    assert not verify("another project's secret", seen)
    engine_tick(advance=10)
    assert len(receiver.seen) == 1 and len(warnings(client, lease)) == 1      # once


@pytest.mark.parametrize("volume", [None, {"size_gb": 5}])
def test_the_warning_promises_a_kept_data_volume_only_to_a_lease_that_has_one(
        client, runtime, receiver, hooked, engine_tick, volume):
    """The warning said "its VMs will be deleted then and the data volume kept" to every lease:
    an owner with no data volume read that their data would be kept, and lost their VMs' disks."""
    body = {"shape": "a100.x1", "duration": "PT1H", **({"volume": volume} if volume else {})}
    lease = client.post("/v1/leases", json=body, headers=headers()).get_json()["lease"]
    engine_tick()
    engine_tick(advance=30)
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    engine_tick()
    [warning] = warnings(client, lease)
    [seen] = receiver.seen
    for said in (warning["message"], json.loads(seen[1])["message"]):
        if volume:
            assert "the data volume kept" in said, said
        else:
            assert "volume kept" not in said and "no data volume" in said, said


def test_a_failed_delivery_is_retried_with_backoff_until_taken(client, runtime, receiver, hooked, engine_tick):
    receiver.codes = [500, 503]
    lease = active_lease(client, engine_tick)
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    engine_tick()
    assert len(receiver.seen) == 1
    engine_tick(advance=5)                   # the backoff (10 s) has not passed
    assert len(receiver.seen) == 1
    engine_tick(advance=6)
    engine_tick(advance=21)
    assert len(receiver.seen) == 3 and all(verify(hooked, s) for s in receiver.seen)
    assert len({s[0]["X-GPU-Tenancy-Delivery"] for s in receiver.seen}) == 1   # the same notice each time
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    assert [e["message"] for e in events if e["kind"] == "webhook"] == [
        "lease.ending_soon delivered to the project's webhook (attempt 3)"]


def test_deliveries_stop_after_the_last_attempt(client, runtime, receiver, hooked, engine_tick):
    receiver.codes = [500] * 20
    lease = active_lease(client, engine_tick, duration="PT8H")
    runtime.clock.set(runtime.clock.now() + 8 * 3600 - LEAD)
    for _ in range(10):
        engine_tick(advance=runtime.config.webhook_backoff_max_seconds // 10)
    assert len(receiver.seen) == runtime.config.webhook_max_attempts
    events = client.get(f"/v1/leases/{lease['id']}/events", headers=headers()).get_json()["events"]
    assert any(e["kind"] == "webhook" and "not delivered after 6" in e["message"] for e in events)


def test_a_leases_notices_arrive_in_order_when_the_first_is_retried(client, runtime, receiver, hooked, engine_tick):
    """A slot moved twice: the receiver's last lease.parked must be the newer slot, even when
    the first notice needed a retry (docs/design.md: the last lease.parked a receiver has is the slot)."""
    from gpu_tenancy.engine import webhooks
    lease = active_lease(client, engine_tick)
    receiver.codes = [500]   # the first notice's first attempt
    with session_scope(runtime.sessions) as session:
        row = session.get_one(m.Lease, lease["id"])
        for message in ("slot at 10:00", "slot at 09:00"):
            webhooks.enqueue(session, row, webhooks.PARKED, {"message": message}, runtime.clock.now())
    for _ in range(4):
        engine_tick(advance=runtime.config.webhook_backoff_seconds)
    taken = [json.loads(body)["message"] for head, body in receiver.seen]
    assert taken[-1] == "slot at 09:00" and taken.count("slot at 09:00") == 1, taken
    assert taken == ["slot at 10:00", "slot at 10:00", "slot at 09:00"]   # the later one waited for the first


def test_a_notice_written_before_a_crash_is_sent_by_the_next_engine(client, runtime, receiver, hooked, engine_tick):
    lease = active_lease(client, engine_tick)
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    runtime.engine.run_once()                  # the notice is written; the engine dies before its outbox sends it
    assert warnings(client, lease) and receiver.seen == []
    successor = EngineRunner(Lifecycle(runtime.sessions, runtime.cloud, runtime.clock, runtime.config))
    runtime.clock.advance(runtime.config.leader_lease_seconds + 1)   # the old leader's lease runs out
    assert successor.run_once()
    successor.outbox.run_once()
    assert successor.outbox.wait(30)
    assert len(receiver.seen) == 1 and verify(hooked, receiver.seen[0])


def test_a_notice_sent_again_after_a_leader_handover_carries_the_same_delivery_id(
        client, runtime, receiver, hooked, engine_tick):
    """Defect 3. The leader POSTs a notice and dies before it records the answer; the next leader
    sends it again (at least once). The receiver drops the repeat by X-GPU-Tenancy-Delivery: it
    must be the same in both, as the body is, while each carries its own valid signature."""
    from gpu_tenancy.engine import outbox, webhooks
    lease = active_lease(client, engine_tick)
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    runtime.engine.run_once()                  # the warning is written

    def post_then_die(target, body, head, deadline):
        outbox.post(target, body, head, deadline)
        raise SystemExit("killed after the receiver took it")   # not an Exception: nothing records it
    runtime.engine.outbox.send = post_then_die
    runtime.engine.outbox.run_once()
    assert runtime.engine.outbox.wait(30) and len(receiver.seen) == 1
    successor = EngineRunner(Lifecycle(runtime.sessions, runtime.cloud, runtime.clock, runtime.config))
    runtime.clock.advance(runtime.config.leader_lease_seconds + 1)   # the old leader's lease runs out
    assert successor.run_once()
    successor.outbox.run_once()
    assert successor.outbox.wait(30)
    first, again = receiver.seen
    assert first[0][webhooks.DELIVERY_HEADER] == again[0][webhooks.DELIVERY_HEADER]
    assert first[1] == again[1] and verify(hooked, first) and verify(hooked, again)
    with session_scope(runtime.sessions) as session:
        [row] = session.scalars(select(m.WebhookDelivery).where(m.WebhookDelivery.lease_id == lease["id"])).all()
        assert (row.status, row.attempts) == ("delivered", 1)


def test_after_the_warning_the_user_can_extend_within_the_rules(client, runtime, receiver, hooked, engine_tick):
    lease = active_lease(client, engine_tick, duration="PT1H")
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    engine_tick()
    assert warnings(client, lease)
    reply = client.patch(f"/v1/leases/{lease['id']}", json={"duration": "PT2H"}, headers=headers())
    assert reply.status_code == 200 and reply.get_json()["lease"]["end"] > lease["end"]
    over = client.patch(f"/v1/leases/{lease['id']}", json={"duration": "P30D"}, headers=headers())
    assert over.status_code == 400 and "maximum" in over.get_json()["errors"][0]["detail"]   # past max_duration
    engine_tick(advance=3600)                # warned again before the new end
    assert len(warnings(client, lease)) == 2 and len(receiver.seen) == 2


@pytest.mark.parametrize("persona, method, status", [
    (headers("ml-vision", "reader"), "GET", 200), (headers("ml-vision", "reader"), "PUT", 403),
    (headers("nlp-lab", "member"), "GET", 403), (headers("nlp-lab", "member"), "PUT", 403),
    (headers("nlp-lab", "member"), "DELETE", 403), ({}, "GET", 401), (headers("ml-vision", "admin"), "GET", 200),
])
def test_webhooks_are_the_projects_own(client, hooked, persona, method, status):
    body = {"webhook": {"url": "http://127.0.0.1:1/x"}} if method == "PUT" else None
    reply = client.open("/v1/webhooks/ml-vision", method=method, json=body, headers=persona)
    assert reply.status_code == status
    if status == 200:
        assert "secret" not in reply.get_json()["webhook"]     # shown once, when set


@pytest.mark.parametrize("webhook", [{"url": "ftp://x.example/h"}, {"url": "javascript:alert(1)"},
                                     {"url": "http://x.example/h", "secret": "short"}, {"url": 5},
                                     {"url": "http://x.example/" + "a" * 3000}, {"url": "http://n1W0Mh}vzj]qh/x"},
                                     {"url": "http://[::1/x"}, {"url": "http://x.example:99999/h"}, {},
                                     {"url": "http://x.example:0/h"}, {"url": "http://[v1.x]/h"},
                                     {"url": "https://hook:s3cret-pass@x.example/h"}])
def test_bad_webhooks_are_400(client, webhook):
    reply = client.put("/v1/webhooks/ml-vision", json={"webhook": webhook}, headers=headers())
    assert reply.status_code == 400 and "s3cret" not in reply.get_data(as_text=True)
    assert client.get("/v1/webhooks/ml-vision", headers=headers()).status_code == 404


def test_a_removed_webhook_gets_nothing(client, runtime, receiver, hooked, engine_tick):
    assert client.delete("/v1/webhooks/ml-vision", headers=headers()).status_code == 204
    lease = active_lease(client, engine_tick)
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    engine_tick()
    assert warnings(client, lease) and receiver.seen == []


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data", "http://127.0.0.1:8774/v2.1", "http://10.0.0.5/hook",
    "http://192.168.1.10/hook", "http://[::1]:5000/", "http://[::ffff:127.0.0.1]/hook", "http://[fe80::1]/hook",
    "http://localhost:5000/", "http://api.localhost/", "http://0.0.0.0/hook", "http://224.0.0.1/hook"])
def test_webhooks_to_internal_addresses_are_refused(client, url):
    """The engine POSTs from the control plane: a tenant may not aim it at the metadata
    service, the cloud's own APIs or the management network."""
    reply = client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": url}}, headers=headers())
    assert reply.status_code == 400
    error = reply.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.webhook_target_refused" and "webhook_allowed_networks" in error["detail"]
    assert client.get("/v1/webhooks/ml-vision", headers=headers()).status_code == 404


def test_an_operator_allows_a_network(client, runtime):
    runtime.config.webhook_allowed_networks = ["10.20.0.0/16"]
    ok = client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": "http://10.20.3.4/h"}}, headers=headers())
    refused = client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": "http://10.21.3.4/h"}}, headers=headers())
    assert ok.status_code == 200 and refused.status_code == 400


def test_a_name_resolving_to_an_internal_address_gets_no_post(client, runtime, receiver, engine_tick, monkeypatch):
    """Names are checked when a notice goes out, on every address they resolve to then."""
    runtime.config.warn_before_end_seconds = LEAD
    port = receiver.server.server_port
    url = f"http://hooks.example:{port}/gpu"
    assert client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": url}}, headers=headers()).status_code == 200
    real = socket.getaddrinfo
    monkeypatch.setattr("gpu_tenancy.engine.webhook_targets.socket.getaddrinfo",
                        lambda host, *a, **k: real("127.0.0.1" if host == "hooks.example" else host, *a, **k))
    lease = active_lease(client, engine_tick)
    runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
    engine_tick()
    assert warnings(client, lease) and receiver.seen == []
    [error] = last_errors(runtime)
    assert "hooks.example (127.0.0.1) is a loopback address" in error


def test_a_redirect_is_not_followed(client, runtime, receiver, hooked, engine_tick):
    """A receiver's redirect could lead where the target check would refuse."""
    elsewhere = Receiver()
    try:
        receiver.codes, receiver.location = [302], elsewhere.url
        lease = active_lease(client, engine_tick)
        runtime.clock.set(runtime.clock.now() + 3600 - LEAD)
        engine_tick()
        assert len(receiver.seen) == 1 and elsewhere.seen == []
        assert last_errors(runtime) == ["HTTP 302"] and warnings(client, lease)
    finally:
        elsewhere.server.shutdown()


def test_a_bad_allowed_network_stops_the_service_at_start():
    with pytest.raises(ValueError, match="webhook_allowed_networks"):
        Config.load(database_url="sqlite://", webhook_allowed_networks=["10.0.0.0/33"])


@pytest.mark.parametrize("option, value", [
    ("webhook_timeout_seconds", 3600),    # a hung receiver would hold a worker an hour a try
    ("webhook_timeout_seconds", 0),
    ("webhook_workers", 0),
    ("webhook_workers_per_target", 0),
    ("webhook_workers_reserved", 8),      # every worker kept back: a failing receiver's notices never go
    ("webhook_workers_reserved", -1),
])
def test_outbox_bounds_out_of_range_stop_the_service_at_start(option, value):
    """Defect 1. Before: any deadline was taken, so an operator's long one let each tenant's hung
    receiver hold a worker that long; and no count was checked."""
    with pytest.raises(ValueError, match=option):
        Config.load(database_url="sqlite://", **{option: value})
    Config.load(database_url="sqlite://", webhook_timeout_seconds=30, webhook_workers_reserved=7)   # the bounds


def last_errors(runtime) -> list[str]:
    with session_scope(runtime.sessions) as session:
        return [d.last_error for d in session.scalars(select(m.WebhookDelivery))]

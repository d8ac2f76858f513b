"""Webhook notices go out from the outbox worker, apart from the engine's tick: a slow
receiver is cut off at a total deadline and retried later, holds at most its share of the
workers, and the connection goes to the address that was checked (no DNS rebinding)."""
from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from tests.conftest import headers
from tests.functional.test_webhooks import LEAD, Receiver

ADMIN = headers("ml-vision", "admin", user="ops")


class Trickler:
    """A receiver on 127.0.0.1 that reads the request, then answers one byte every
    `every` seconds for `lasting` seconds: each read is quick, the answer never comes."""

    def __init__(self, every: float = 0.5, lasting: float = 12.0):
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/slow"
        self.every, self.lasting, self.open = every, lasting, True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while self.open:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn):
        with conn:
            conn.recv(65536)
            ends = time.monotonic() + self.lasting
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                    if time.monotonic() > ends or not self.open:
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
            except OSError:
                return

    def close(self):
        self.open = False
        self.listener.close()


@pytest.fixture
def trickler():
    t = Trickler()
    yield t
    t.close()


@pytest.fixture
def fast():
    r = Receiver()
    yield r
    r.server.shutdown()


def set_webhook(client, project, url):
    reply = client.put(f"/v1/webhooks/{project}", json={"webhook": {"url": url}}, headers=headers(project))
    assert reply.status_code == 200, reply.get_json()


def active_leases(client, runtime, project, count):
    ids = [client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                       headers=headers(project)).get_json()["lease"]["id"] for _ in range(count)]
    runtime.engine.run_once()
    runtime.clock.advance(30)
    runtime.engine.run_once()
    return ids


def deliveries(runtime, project=None):
    with session_scope(runtime.sessions) as session:
        query = select(m.WebhookDelivery).order_by(m.WebhookDelivery.id)
        if project:
            query = query.where(m.WebhookDelivery.project_id == project)
        return [(d.status, d.attempts, d.last_error, to_epoch(d.next_attempt_at)) for d in session.scalars(query)]


@pytest.fixture
def loopback(runtime):
    runtime.config.warn_before_end_seconds = LEAD
    runtime.config.webhook_allowed_networks = ["127.0.0.0/8"]
    runtime.config.webhook_timeout_seconds = 1.5


def test_a_slow_receiver_does_not_hold_the_tick_and_is_cut_off_at_the_total_deadline(
        client, runtime, trickler, loopback):
    """Finding 2. Before: the tick POSTed, with a 5 s time-out per read; this receiver's
    bytes every 0.5 s held the tick until the receiver gave up (12 s)."""
    set_webhook(client, "ml-vision", trickler.url)
    active_leases(client, runtime, "ml-vision", 1)
    runtime.clock.advance(3600 - LEAD)
    runtime.engine.run_once()                        # writes the notice, sends nothing
    assert trickler.connections == 0
    [(status, attempts, _, _)] = deliveries(runtime)
    assert (status, attempts) == ("pending", 0)

    began = time.monotonic()
    assert runtime.engine.outbox.run_once() == 1
    assert runtime.engine.outbox.wait(10)
    took = time.monotonic() - began
    assert trickler.connections == 1
    assert 1.5 <= took < 6, took                     # the deadline, not the receiver's 12 s
    [(status, attempts, error, next_at)] = deliveries(runtime)
    assert (status, attempts) == ("pending", 1) and "DeadlinePassed: no answer within 1.5 s" in error
    assert next_at == runtime.clock.now() + runtime.config.webhook_backoff_seconds

    runtime.engine.outbox.run_once()                 # not due yet
    assert runtime.engine.outbox.wait(10) and trickler.connections == 1
    runtime.clock.advance(runtime.config.webhook_backoff_seconds)
    runtime.engine.outbox.run_once()                 # retried after the backoff
    assert runtime.engine.outbox.wait(10) and trickler.connections == 2
    assert deliveries(runtime)[0][:2] == ("pending", 2)


def test_a_slow_receiver_does_not_delay_another_projects_notices(client, runtime, trickler, fast, loopback):
    """Finding 2. Two workers, one per receiver: ml-vision's three notices to its slow
    receiver (the oldest, so first in line) take one; nlp-lab's is sent at once by the other."""
    runtime.config.webhook_workers, runtime.config.webhook_workers_per_target = 2, 1
    runtime.config.webhook_timeout_seconds = 4
    from gpu_tenancy.engine.outbox import Outbox
    outbox = Outbox(runtime.sessions, runtime.clock, runtime.config)
    set_webhook(client, "ml-vision", trickler.url)
    set_webhook(client, "nlp-lab", fast.url)
    active_leases(client, runtime, "ml-vision", 3)
    active_leases(client, runtime, "nlp-lab", 1)
    runtime.clock.advance(3600 - LEAD)
    runtime.engine.run_once()
    assert [d[0] for d in deliveries(runtime)] == ["pending"] * 4

    began = time.monotonic()
    assert outbox.run_once() == 2                    # one slow, one fast: not two slow
    while not fast.seen and time.monotonic() - began < 4:
        time.sleep(0.02)
    try:
        assert len(fast.seen) == 1 and outbox.sending() >= 1   # delivered while the slow one still waits
        # the slow one's worker connects in its own thread: on a busy machine after the fast one is seen
        while trickler.connections < 1 and time.monotonic() - began < 4:
            time.sleep(0.02)
        assert trickler.connections == 1
        assert outbox.wait(10)
        assert deliveries(runtime, "nlp-lab")[0][:2] == ("delivered", 1)
        assert [d[:2] for d in deliveries(runtime, "ml-vision")] == [("pending", 1), ("pending", 0), ("pending", 0)]
    finally:   # its workers, left sending, would hold the next test's TRUNCATE
        outbox.stop()
        outbox.wait(10)


@pytest.fixture
def two_loopbacks():
    """The receiver the check allows (127.0.0.2) and the one it does not (127.0.0.1),
    on the same port, as a rebinding name would point at one and then the other."""
    for _ in range(20):
        allowed = Receiver(host="127.0.0.2")
        port = allowed.server.server_port
        try:
            internal = Receiver(host="127.0.0.1", port=port)
        except OSError:
            allowed.server.shutdown()
            continue
        yield allowed, internal, port
        allowed.server.shutdown()
        internal.server.shutdown()
        return
    pytest.skip("no port free on both 127.0.0.1 and 127.0.0.2")


def test_a_name_that_rebinds_after_the_check_never_reaches_the_internal_address(
        client, runtime, two_loopbacks, loopback, monkeypatch):
    """Finding 6. The resolver answers 127.0.0.2 (allowed) first and 127.0.0.1 after.
    Before: the check resolved it, then the send resolved it again and reached 127.0.0.1."""
    allowed, internal, port = two_loopbacks
    runtime.config.webhook_allowed_networks = ["127.0.0.2/32"]
    set_webhook(client, "ml-vision", f"http://hooks.example:{port}/gpu")
    answers = []
    real = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):
        if host == "hooks.example":
            answers.append(host)
            host = "127.0.0.2" if len(answers) == 1 else "127.0.0.1"
        return real(host, *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    active_leases(client, runtime, "ml-vision", 1)
    runtime.clock.advance(3600 - LEAD)
    runtime.engine.run_once()
    runtime.engine.outbox.run_once()
    assert runtime.engine.outbox.wait(10)
    assert internal.seen == [] and len(allowed.seen) == 1
    assert allowed.seen[0][0]["Host"] == f"hooks.example:{port}"   # the name, though sent to the address
    assert len(answers) == 1 and deliveries(runtime)[0][:2] == ("delivered", 1)


def test_tls_is_checked_against_the_name_while_connecting_to_the_checked_address(
        client, runtime, loopback, monkeypatch, tmp_path):
    """Pinning keeps TLS whole: SNI and the certificate check use the URL's name."""
    from gpu_tenancy.engine import outbox
    ca_file, server = tls_receiver(tmp_path, "hooks.example")
    try:
        trusting = outbox.ssl.create_default_context(cafile=str(ca_file))   # the throwaway CA only
        monkeypatch.setattr(outbox.ssl, "create_default_context", lambda: trusting)
        real = socket.getaddrinfo
        monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: real(
            "127.0.0.1" if host == "hooks.example" else host, *a, **k))
        set_webhook(client, "ml-vision", f"https://hooks.example:{server.port}/gpu")
        active_leases(client, runtime, "ml-vision", 1)
        runtime.clock.advance(3600 - LEAD)
        runtime.engine.run_once()
        runtime.engine.outbox.run_once()
        assert runtime.engine.outbox.wait(10)
        assert deliveries(runtime)[0][:3] == ("delivered", 1, None) and server.names == ["hooks.example"]
    finally:
        server.close()


def tls_receiver(tmp_path, name):
    """An HTTPS receiver on 127.0.0.1 with a certificate for `name` from a throwaway CA."""
    crypto = pytest.importorskip("cryptography.x509")
    import datetime as dt
    import ssl

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    subject = crypto.Name([crypto.NameAttribute(crypto.NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (crypto.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(crypto.random_serial_number()).not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(crypto.SubjectAlternativeName([crypto.DNSName(name)]), critical=False)
            .add_extension(crypto.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    names: list[str] = []
    context.sni_callback = lambda sock, server_name, ctx: names.append(server_name)
    receiver = Receiver()
    receiver.server.socket = context.wrap_socket(receiver.server.socket, server_side=True)
    receiver.port, receiver.names = receiver.server.server_port, names
    receiver.close = receiver.server.shutdown
    return cert_file, receiver


@pytest.mark.parametrize("address, inner", [
    ("2002:7f00:1::1", "127.0.0.1"),                      # 6to4
    ("2002:a9fe:a9fe::", "169.254.169.254"),              # 6to4: the metadata service
    ("2002:a00:5::1", "10.0.0.5"),                        # 6to4
    ("2001:0:4136:e378:8000:63bf:f5ff:fffa", "10.0.0.5"),  # Teredo (the client address is inverted)
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),            # NAT64
    ("64:ff9b:1::c0a8:10a", "192.168.1.10"),              # NAT64, local use
    ("::ffff:a00:5", "10.0.0.5"),                         # IPv4-mapped
])
def test_ipv6_forms_that_carry_an_internal_ipv4_address_are_refused(client, address, inner):
    """Finding 6: the IPv4 address inside is what the packets reach."""
    reply = client.put("/v1/webhooks/ml-vision", json={"webhook": {"url": f"http://[{address}]/h"}},
                       headers=headers())
    assert reply.status_code == 400
    error = reply.get_json()["errors"][0]
    assert error["code"] == "gpu_tenancy.webhook_target_refused" and f"for {inner}," in error["detail"]


def test_a_name_resolving_to_a_wrapped_internal_address_gets_no_post(client, runtime, loopback, monkeypatch):
    runtime.config.webhook_allowed_networks = []
    set_webhook(client, "ml-vision", "http://hooks.example/gpu")
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2002:7f00:1::1", 0, 0, 0))])
    sent = []
    monkeypatch.setattr(runtime.engine.outbox, "send", lambda *a: sent.append(a) or 204)
    active_leases(client, runtime, "ml-vision", 1)
    runtime.clock.advance(3600 - LEAD)
    runtime.engine.run_once()
    runtime.engine.outbox.run_once()
    assert runtime.engine.outbox.wait(10)
    assert sent == [] and "6to4 for 127.0.0.1" in deliveries(runtime)[0][2]


def test_tenants_see_that_a_delivery_failed_and_admins_why(client, runtime, loopback, monkeypatch):
    """Finding 6. Before: the lease's events (which tenants read) said how the name resolved."""
    runtime.config.webhook_allowed_networks, runtime.config.webhook_max_attempts = [], 1
    set_webhook(client, "ml-vision", "http://hooks.internal.example/gpu")
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: real(
        "10.1.2.3" if host == "hooks.internal.example" else host, *a, **k))
    [lease_id] = active_leases(client, runtime, "ml-vision", 1)
    runtime.clock.advance(3600 - LEAD)
    runtime.engine.run_once()
    runtime.engine.outbox.run_once()
    assert runtime.engine.outbox.wait(10)
    events = client.get(f"/v1/leases/{lease_id}/events", headers=headers()).get_json()["events"]
    [told] = [e["message"] for e in events if e["kind"] == "webhook"]
    assert told.startswith("lease.ending_soon not delivered after 1 attempt(s): delivery failed")
    assert "10.1.2.3" not in told and "private" not in told
    member = client.get("/v1/webhooks/ml-vision", headers=headers()).get_json()["webhook"]
    assert member["recent_deliveries"] is None   # present in every answer (the schemas are closed), filled for admins only
    admin = client.get("/v1/webhooks/ml-vision", headers=ADMIN).get_json()["webhook"]
    [delivery] = admin["recent_deliveries"]
    assert delivery["status"] == "failed" and "hooks.internal.example (10.1.2.3) is a private" in delivery["last_error"]


def test_one_projects_backlog_does_not_keep_another_projects_notice_from_a_free_worker(
        client, runtime, fast, loopback, monkeypatch):
    """Review 2. Eight workers, two per receiver: ml-vision has 40 notices due, older than
    nlp-lab's one. Before: each pass read the 32 oldest (all ml-vision's), handed two to
    ml-vision's receiver and left six workers idle; nlp-lab waited a pass for every two of
    ml-vision's notices (100 s here, at 5 s a pass)."""
    runtime.config.webhook_workers, runtime.config.webhook_workers_per_target = 8, 2
    from gpu_tenancy.engine.outbox import Outbox
    release = threading.Event()

    def send(target, body, headers, deadline):
        if target.port != fast.server.server_port:
            release.wait(10)   # ml-vision's receiver is slow: its two workers stay busy
        return 204
    outbox = Outbox(runtime.sessions, runtime.clock, runtime.config, send=send)
    slow = Receiver()
    try:
        set_webhook(client, "ml-vision", slow.url)
        set_webhook(client, "nlp-lab", fast.url)
        visions = active_leases(client, runtime, "ml-vision", 2)   # a lease's notices go one at a time, in order
        [nlp] = active_leases(client, runtime, "nlp-lab", 1)
        now = runtime.clock.now()
        with session_scope(runtime.sessions) as session:
            for i in range(40):
                session.add(m.WebhookDelivery(project_id="ml-vision", lease_id=visions[i % 2], event="lease.idle",
                                              body="{}", status="pending", attempts=0,
                                              next_attempt_at=utcnow_naive(now - 100 + i), created_at=utcnow_naive(now)))
            session.add(m.WebhookDelivery(project_id="nlp-lab", lease_id=nlp, event="lease.idle", body="{}",
                                          status="pending", attempts=0, next_attempt_at=utcnow_naive(now),
                                          created_at=utcnow_naive(now)))
        assert outbox.run_once() == 3                 # two of ml-vision's, and nlp-lab's
        release.set()
        assert outbox.wait(10)
        assert deliveries(runtime, "nlp-lab")[0][:2] == ("delivered", 1)
    finally:
        release.set()
        outbox.stop()
        outbox.wait(10)
        slow.server.shutdown()


def test_a_name_with_many_unanswering_addresses_is_cut_off_at_the_total_deadline(monkeypatch):
    """Review 2. A tenant's name may resolve to many global addresses that never answer a SYN.
    Before: each address was tried for the whole deadline in turn, the deadline passed during the
    first, so a worker (and the stop of the outbox) was held addresses x deadline."""
    from gpu_tenancy.engine import outbox
    from gpu_tenancy.engine.webhook_targets import Target
    tried = []

    def blackhole(address, timeout=None, *args, **kwargs):
        tried.append(address)
        time.sleep(timeout)
        raise TimeoutError("timed out")
    monkeypatch.setattr(outbox.socket, "create_connection", blackhole)
    target = Target("http", "hooks.example", 80, "/h", tuple(f"198.51.100.{i}" for i in range(1, 9)))
    began = time.monotonic()
    with pytest.raises(outbox.DeadlinePassed):
        outbox.post(target, b"{}", {}, 0.3)
    took = time.monotonic() - began
    assert took < 1.0, (took, len(tried))


def test_a_projects_hung_path_on_a_shared_host_does_not_hold_another_projects_notice(client, runtime, loopback):
    """Found by tests/property/test_webhook_order_property.py. Two projects' receivers on one host
    (a relay or gateway, a path each); ml-vision's path hangs. Before: the workers' share was the
    host's, so ml-vision's two hung notices took it and nlp-lab's waited for the next pass."""
    runtime.config.webhook_workers, runtime.config.webhook_workers_per_target = 8, 2
    release, sent = threading.Event(), []

    def send(target, body, headers, deadline):
        sent.append(target.path)
        if target.path == "/ml-vision":
            release.wait(10)   # hung until cut off at its deadline
        return 204
    from gpu_tenancy.engine.outbox import Outbox
    outbox = Outbox(runtime.sessions, runtime.clock, runtime.config, send=send)
    try:
        set_webhook(client, "ml-vision", "http://127.0.0.2:8080/ml-vision")
        set_webhook(client, "nlp-lab", "http://127.0.0.2:8080/nlp-lab")
        active_leases(client, runtime, "ml-vision", 3)
        active_leases(client, runtime, "nlp-lab", 1)
        runtime.clock.advance(3600 - LEAD)
        runtime.engine.run_once()
        assert outbox.run_once() == 3                 # two of ml-vision's, and nlp-lab's
        began = time.monotonic()
        while "/nlp-lab" not in sent and time.monotonic() - began < 4:
            time.sleep(0.02)
        assert sent.count("/ml-vision") == 2 and "/nlp-lab" in sent
    finally:
        release.set()
        outbox.stop()
        outbox.wait(10)


def stub_lease(session, project: str, n: int, now: int) -> str:
    """A lease row for a notice to tell of (the outbox reads no more of it than its id)."""
    lease_id = f"{project}-{n}"
    session.add(m.Lease(id=lease_id, name=lease_id, project_id=project, user_id="u", status="ended",
                        shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=1, duration=3600,
                        earliest_start=utcnow_naive(now - 7200), start_at=utcnow_naive(now - 7200),
                        end_at=utcnow_naive(now - 3600), queue_reasons=[], created_at=utcnow_naive(now - 7200),
                        updated_at=utcnow_naive(now - 3600)))
    return lease_id


def write_notices(runtime, project: str, count: int, first: int = 0) -> None:
    """`count` notices due now for `project`, one per lease (a lease's notices go one at a time)."""
    now = runtime.clock.now()
    with session_scope(runtime.sessions) as session:
        if session.get(m.ProjectWebhook, project) is None:
            session.add(m.ProjectWebhook(project_id=project, url=f"http://127.0.0.2:8080/{project}", secret="s" * 32,
                                         created_at=utcnow_naive(now), updated_at=utcnow_naive(now)))
        for n in range(first, first + count):
            lease_id = stub_lease(session, project, n, now)
            session.flush()
            session.add(m.WebhookDelivery(project_id=project, lease_id=lease_id, event="lease.idle", body="{}",
                                          status="pending", attempts=0, next_attempt_at=utcnow_naive(now),
                                          created_at=utcnow_naive(now)))


@pytest.mark.parametrize("hung_projects, before", [
    (4, "nothing"),     # their first notices: four projects, two workers each, were all eight
    (4, "failed"),      # their receivers were cut off at the deadline before, and their retries are due
    (8, "failed"),
    (20, "failed"),
    (6, "recovered"),   # each answered its retry, and hangs again: a failure a moment ago still counts
])
def test_hung_receivers_of_several_projects_leave_a_worker_for_another_projects_notice(
        client, runtime, loopback, hung_projects, before):
    """Defect 1. Eight workers, two per project; `hung_projects` projects' receivers hang (until
    cut off at the deadline), each with notices of several leases due. Before: four such projects
    took all eight workers, two each, and took them again with their next notices at every
    deadline, so a well-behaved project's notice waited behind them however many passes ran.
    Now a project whose receiver is failing, or that has a notice under way already, leaves
    `webhook_workers_reserved` workers free: the well-behaved notice is sent in the next pass."""
    config = runtime.config
    config.webhook_workers, config.webhook_workers_per_target, config.webhook_workers_reserved = 8, 2, 2
    from gpu_tenancy.engine.outbox import DeadlinePassed, Outbox
    release, delivered, answering, tried = threading.Event(), threading.Event(), threading.Event(), set()

    def send(target, body, headers, deadline):
        if target.path == "/good":
            delivered.set()
            return 204
        tried.add(target.path)
        if answering.is_set():
            return 204
        release.wait(10)   # hung until cut off at its deadline
        raise DeadlinePassed(f"no answer within {deadline:g} s")
    outbox = Outbox(runtime.sessions, runtime.clock, config, send=send)
    hung = [f"hung-{i}" for i in range(hung_projects)]
    try:
        for project in hung:
            write_notices(runtime, project, 3)
        written = 3
        if before != "nothing":   # passes until each hung receiver has been cut off at the deadline
            for _ in range(hung_projects):
                outbox.run_once()
                release.set()
                assert outbox.wait(10)
                release.clear()
                runtime.clock.advance(config.webhook_backoff_seconds * 2)
                if len(tried) == hung_projects:
                    break
            assert len(tried) == hung_projects
        if before == "recovered":   # their retries answered: no notice of theirs waits for a retry now
            answering.set()
            for _ in range(6):
                outbox.run_once()
                assert outbox.wait(10)
                runtime.clock.advance(config.webhook_backoff_seconds * 2)
            answering.clear()
        for project in hung:
            write_notices(runtime, project, 3, first=written)   # and their leases go on writing
        outbox.run_once()                                  # the hung receivers take what they may, and hang
        assert outbox.sending() >= min(hung_projects, config.webhook_workers - config.webhook_workers_reserved)
        write_notices(runtime, "good", 1)
        assert outbox.run_once() == 1                      # the next pass, the hung receivers still holding theirs
        assert delivered.wait(4)
    finally:
        release.set()
        outbox.stop()
        outbox.wait(10)


def test_a_delivery_whose_result_could_not_be_recorded_is_sent_again_after_the_backoff(
        client, runtime, loopback, monkeypatch):
    """Defect 2. The POST went, but writing its result failed (the database away a moment).
    Before: the notice stayed due as it was, and every pass of the outbox (each engine tick)
    sent it again at once, with no backoff, for as long as the writes failed. Now it waits the
    backoff a failed delivery waits, doubling with each write that fails."""
    from gpu_tenancy.engine import webhooks
    from gpu_tenancy.engine.outbox import Outbox
    config = runtime.config
    sent: list[str] = []
    outbox = Outbox(runtime.sessions, runtime.clock, config, send=lambda t, b, h, d: sent.append(
        h[webhooks.DELIVERY_HEADER]) or 503)
    real, broken = webhooks.record_attempt, [True]

    def record_attempt(*args, **kwargs):
        if broken[0]:
            raise RuntimeError("the database went away")
        return real(*args, **kwargs)
    monkeypatch.setattr(webhooks, "record_attempt", record_attempt)
    try:
        write_notices(runtime, "ml-vision", 1)
        at = []   # when each try was sent
        for _ in range(40):
            before = len(sent)
            outbox.run_once()
            assert outbox.wait(10)
            at += [runtime.clock.now()] * (len(sent) - before)
            runtime.clock.advance(1)
        gaps = [b - a for a, b in zip(at, at[1:])]
        assert gaps == [config.webhook_backoff_seconds, 2 * config.webhook_backoff_seconds], at   # not one a pass
        broken[0] = False
        runtime.clock.advance(40)
        outbox.run_once()
        assert outbox.wait(10)
        assert deliveries(runtime)[0][:2] == ("pending", 1)   # recorded at last, and retried with its own backoff
        assert len(set(sent)) == 1
    finally:
        outbox.stop()
        outbox.wait(10)

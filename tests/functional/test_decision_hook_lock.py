"""The operator's decision service is asked with no transaction open: while it
thinks, the ledger lock (on SQLite, the database's write lock) is free and other
tenants' requests go through; what it allowed is checked again under the lock."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import OperationalError

from gpu_tenancy.db.models import Lock
from tests.conftest import headers

VISION = headers("ml-vision", "member", user="alice")
NLP = headers("nlp-lab", "member", user="bob")


def ledger_lock_free(url: str) -> bool:
    """Try to take the ledger lock without waiting (SQLite: the write lock)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 0}, isolation_level="AUTOCOMMIT")
        statements = [text("BEGIN IMMEDIATE"), text("ROLLBACK")]
    else:
        engine = create_engine(url)
        statements = [select(Lock).where(Lock.name == "ledger").with_for_update(nowait=True)]
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(statement)
            conn.rollback()
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()


class Service:
    """A decision service on 127.0.0.1 that, while asked about ml-vision, checks the ledger
    lock and has another tenant create a lease (which needs that lock), then allows."""

    def __init__(self, app, url):
        self.calls: list[dict] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body["lease"]["project_id"] == "nlp-lab":    # the other tenant's own question
                    self.send_response(204)
                    self.end_headers()
                    return
                other = app.test_client().post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                                               headers=NLP)
                service.calls.append({"action": body["action"], "lock_free": ledger_lock_free(url),
                                      "other_tenant": other.status_code})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/decide"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def service(app, runtime):
    s = Service(app, runtime.config.database_url)
    yield s
    s.server.shutdown()
    s.server.server_close()


def lease(client, duration="PT1H"):
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": duration}, headers=VISION)
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["lease"]


@pytest.mark.parametrize("action", ["accept", "extend", "end"])
def test_the_ledger_lock_is_free_while_the_decision_service_is_asked(client, runtime, service, action):
    """Before: the question was asked inside the request's transaction; the other tenant's
    create waited for the lock until the service timed out, and the default (deny) refused."""
    existing = None if action == "accept" else lease(client)
    runtime.config.decision_hook_url = service.url
    runtime.config.decision_hook_timeout_seconds = 10
    runtime.config.decision_hook_default = "deny"
    if action == "accept":
        reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"}, headers=VISION)
        assert reply.status_code == 201, reply.get_json()
    elif action == "extend":
        reply = client.patch(f"/v1/leases/{existing['id']}", json={"duration": "PT2H"}, headers=VISION)
        assert reply.status_code == 200, reply.get_json()
        assert reply.get_json()["lease"]["duration"] == 7200
    else:
        reply = client.delete(f"/v1/leases/{existing['id']}", headers=VISION)
        assert reply.status_code == 204, reply.get_json()
    assert service.calls == [{"action": action, "lock_free": True, "other_tenant": 201}]


def test_terms_changed_while_the_service_was_asked_are_refused_with_409(app, client, runtime, monkeypatch):
    """The service allowed a lease of priority class "low" at priority -10; meanwhile an
    admin moved the class to -20: the answer is about other terms, so no lease is made."""
    runtime.config.decision_hook_url = "http://127.0.0.1:9/unused"
    asked = []

    def meanwhile(hook, action, lease_view, user_id):
        asked.append(lease_view["priority"])
        replies = []
        other = threading.Thread(target=lambda: replies.append(app.test_client().put(
            "/v1/priority_classes/low", json={"priority_class": {"priority": -20}},
            headers=headers("ml-vision", "admin", user="ops")).status_code))
        other.start()
        other.join()
        assert replies == [200]
    monkeypatch.setattr("gpu_tenancy.engine.decision_hook.DecisionHook.ask", meanwhile)
    reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "priority_class": "low"},
                        headers=VISION)
    assert reply.status_code == 409, reply.get_json()
    assert reply.get_json()["errors"][0]["code"] == "gpu_tenancy.changed_during_decision"
    assert asked == [-10]
    assert client.get("/v1/leases", headers=VISION).get_json()["leases"] == []

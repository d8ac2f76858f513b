"""The openstack driver's connections send a read again when the API server
dropped the connection without answering, and never a write: a real
keystoneauth session against a socket server on 127.0.0.1 that hangs up on
the first requests it reads."""
from __future__ import annotations

import socket
import threading

import pytest
from keystoneauth1 import exceptions as ksa

from gpu_tenancy.cloud.openstack.connection import READ_RETRIES, Connections, connect


class HangingUpServer:
    """Answers 200 to every request after the first `drops`, which it reads and
    then closes without a word, as a server whose keep-alive timed out does
    (`answers` False: it answers none, a server too slow to)."""

    def __init__(self, drops: int, answers: bool = True):
        self.drops, self.answers = drops, answers
        self.methods: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v2.1/servers/detail"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with client:
                request = self._read(client)
                if not request:
                    continue
                self.methods.append(request.split(b" ", 1)[0].decode())
                if len(self.methods) <= self.drops:
                    continue   # hang up, no response
                if not self.answers:   # keep the connection, say nothing until the client gives up
                    client.recv(1)
                    continue
                body = b'{"servers": []}'
                client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    @staticmethod
    def _read(client: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += client.recv(65536)
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def clouds_yaml(tmp_path):
    # Keystone is never asked: the calls below are not authenticated
    path = tmp_path / "clouds.yaml"
    path.write_text("clouds:\n  loop:\n    auth:\n      auth_url: http://127.0.0.1:9/identity\n"
                    "      username: u\n      password: p\n      project_name: p\n"
                    "      user_domain_id: default\n      project_domain_id: default\n")
    return str(path)


def test_a_dropped_read_is_sent_again(clouds_yaml):
    server = HangingUpServer(drops=1)
    try:
        response = connect("loop", clouds_yaml).session.get(server.url, authenticated=False)
    finally:
        server.close()
    assert response.json() == {"servers": []}
    assert server.methods == ["GET", "GET"]


def test_a_dropped_write_is_not_sent_again(clouds_yaml):
    server = HangingUpServer(drops=1)
    try:
        with pytest.raises(ksa.ConnectFailure):
            connect("loop", clouds_yaml).session.post(server.url, json={"server": {}}, authenticated=False)
    finally:
        server.close()
    assert server.methods == ["POST"]


def test_a_read_the_server_keeps_dropping_fails_after_the_retries(clouds_yaml):
    server = HangingUpServer(drops=100)
    try:
        with pytest.raises(ksa.ConnectFailure):
            connect("loop", clouds_yaml).session.get(server.url, authenticated=False)
    finally:
        server.close()
    assert server.methods == ["GET"] * (1 + READ_RETRIES.read)


def test_a_project_connection_retries_reads_too(clouds_yaml):
    # connect_as builds a new HTTP session (no Keystone asked until a call is authenticated)
    conn = Connections(connect("loop", clouds_yaml), project_role=None)._connect_as("p1")
    server = HangingUpServer(drops=1)
    try:
        assert conn.session.get(server.url, authenticated=False).status_code == 200
    finally:
        server.close()
    assert server.methods == ["GET", "GET"]


def test_a_read_that_is_only_slow_is_not_sent_again(clouds_yaml):
    server = HangingUpServer(drops=0, answers=False)
    try:
        with pytest.raises(ksa.ConnectTimeout):   # the timeout it was, as before the retries
            connect("loop", clouds_yaml).session.get(server.url, authenticated=False, timeout=0.5)
    finally:
        server.close()
    assert server.methods == ["GET"]


def _get_in_a_thread(conn, url: str, wait: float):
    """conn's GET of `url` as the engine makes it (no timeout of its own), in a thread: what
    it raised, or None if it still waits after `wait` seconds."""
    outcome: list = []

    def call():
        try:
            conn.session.get(url, authenticated=False)
            outcome.append("answered")
        except Exception as exc:   # what the call raised, for the assert
            outcome.append(exc)
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(wait)
    return outcome[0] if outcome else None


@pytest.mark.parametrize("project", [False, True])
def test_a_call_the_api_never_answers_times_out_rather_than_hold_the_engine(clouds_yaml, monkeypatch, project):
    # an API server that took the request and says nothing (a half-open connection, a stuck
    # worker): with no api_timeout in clouds.yaml the call waited for ever, and the engine's
    # pass, every lease's start and end, with it
    from gpu_tenancy.cloud.openstack import connection
    monkeypatch.setattr(connection, "API_TIMEOUT", 0.5, raising=False)
    conn = connect("loop", clouds_yaml)
    if project:   # a tenant project's connection, made from the service's
        conn = Connections(conn, project_role=None)._connect_as("p1")
    server = HangingUpServer(drops=0, answers=False)
    try:
        outcome = _get_in_a_thread(conn, server.url, wait=10)
    finally:
        server.close()
    assert outcome is not None, "the call still waits for an answer after 10 s"
    assert isinstance(outcome, ksa.ConnectTimeout)


def test_an_api_timeout_set_in_clouds_yaml_is_kept(tmp_path):
    path = tmp_path / "clouds.yaml"
    path.write_text("clouds:\n  loop:\n    api_timeout: 7\n    auth:\n      auth_url: http://127.0.0.1:9/identity\n"
                    "      username: u\n      password: p\n      project_name: p\n"
                    "      user_domain_id: default\n      project_domain_id: default\n")
    assert float(connect("loop", str(path)).session.timeout) == 7

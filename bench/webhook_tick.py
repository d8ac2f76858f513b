"""A slow webhook receiver against the engine: how long the engine's ticks take, and
how soon another project's notice reaches its (fast) receiver. Prints figures;
asserts nothing.

    python bench/webhook_tick.py [--every 3] [--lasting 45]

In one process on a throwaway SQLite file with the simulated cloud and a virtual
clock: ml-vision's webhook is a receiver on 127.0.0.1 that reads the POST and
then answers one byte every --every seconds for --lasting seconds; nlp-lab's
answers at once. Each project has one running lease whose before-end warning
falls due; then two engine ticks are timed, and the outbox worker (when the code
has one) runs beside them as the engine's scheduler would run it.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))

from gpu_tenancy.app import create_app  # noqa: E402
from gpu_tenancy.clock import VirtualClock  # noqa: E402
from gpu_tenancy.cloud.simulated import SimulatedCloud  # noqa: E402
from gpu_tenancy.config import DEMO_CLOUD, Config  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from gpu_tenancy.db.session import session_scope  # noqa: E402
from gpu_tenancy.demo.seed import seed  # noqa: E402

LEAD = 600


def trickler(every: float, lasting: float) -> str:
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(conn):
        with conn:
            conn.recv(65536)
            ends = time.monotonic() + lasting
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                if time.monotonic() > ends:
                    return
                conn.sendall(bytes([byte]))
                time.sleep(every)

    def serve():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=answer, args=(conn,), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/slow"


def fast_receiver(seen: list[float]) -> str:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server name
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(time.monotonic())
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/fast"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=float, default=3.0)
    parser.add_argument("--lasting", type=float, default=45.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        migrate.upgrade(url)
        clock = VirtualClock(1_796_112_000)
        config = Config.load(database_url=url, auth_strategy="noauth2", warn_before_end_seconds=LEAD,
                             webhook_allowed_networks=["127.0.0.0/8"])
        app = create_app(config, clock=clock, cloud=SimulatedCloud.from_file(DEMO_CLOUD, clock), start_engine=False)
        runtime = app.extensions["gpu_tenancy"]
        with session_scope(runtime.sessions) as session:
            seed(session, clock.now(), runtime.cloud.images())
        runtime.engine.lifecycle.refresh_hosts()
        client = app.test_client()
        seen: list[float] = []
        for project, hook in (("ml-vision", trickler(args.every, args.lasting)), ("nlp-lab", fast_receiver(seen))):
            who = {"X-Project-Id": project, "X-User-Id": f"{project}-user", "X-Roles": "member"}
            assert client.put(f"/v1/webhooks/{project}", json={"webhook": {"url": hook}}, headers=who).status_code == 200
            assert client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H"},
                               headers=who).status_code == 201
        runtime.engine.run_once()
        clock.advance(30)
        runtime.engine.run_once()
        clock.advance(3600 - LEAD)
        outbox = getattr(runtime.engine, "outbox", None)
        stop = threading.Event()
        if outbox is not None:   # as the engine's scheduler runs it, every 0.2 s here
            def passes():
                while not stop.wait(0.2):
                    outbox.run_once()
            threading.Thread(target=passes, daemon=True).start()
        began = time.monotonic()
        ticks = []
        for _ in range(2):
            start = time.monotonic()
            runtime.engine.run_once()
            ticks.append(time.monotonic() - start)
        while not seen and time.monotonic() - began < args.lasting + 30:
            time.sleep(0.05)
        stop.set()
        print(f"outbox worker: {'yes' if outbox is not None else 'no (deliveries in the tick)'}; "
              f"slow receiver: a byte every {args.every:g} s for {args.lasting:g} s; "
              f"webhook_timeout_seconds {config.webhook_timeout_seconds:g}")
        print("engine ticks: " + ", ".join(f"{t:.2f} s" for t in ticks))
        print(f"nlp-lab's notice (fast receiver) delivered after "
              f"{(seen[0] - began):.2f} s" if seen else "nlp-lab's notice: not delivered")
        if outbox is not None:
            outbox.wait(config.webhook_timeout_seconds + 5)
            outbox.stop()


if __name__ == "__main__":
    main()

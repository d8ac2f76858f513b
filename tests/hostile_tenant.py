"""A hostile tenant, as issue 15 found one: every request below once stopped, slowed or
told something to another tenant. `hostile_round` sends each once through a Flask test
client and returns the statuses it got; the noisy-neighbour test and bench/noisy_neighbour.py
send it in a loop beside another project's work. Only 127.0.0.1 is ever reached (the slow
webhook receiver is started here, on a port the kernel picks)."""
from __future__ import annotations

import socket
import statistics
import threading
import time
from collections import Counter
from typing import Any

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.demo.seed import seed
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import T0, headers

DAY = 86400


def nested(depth: int) -> bytes:
    return b'{"shape": ' + b"[" * depth + b"]" * depth + b"}"


class TricklingReceiver:
    """A webhook receiver that answers one byte every `gap` seconds (issue 15, finding 2)."""

    def __init__(self, gap: float = 0.5):
        self.gap, self.hits = gap, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\n":
                if self._stop.wait(self.gap):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


class HostileTenant:
    """One member of `project` who asks for everything that once hurt the others."""

    def __init__(self, client, headers: dict, now, receiver: TricklingReceiver | None = None):
        self.client, self.headers, self.now, self.receiver = client, headers, now, receiver
        self.statuses: Counter = Counter()
        self.own_leases: list[str] = []

    def _note(self, what: str, response) -> None:
        self.statuses[(what, response.status_code)] += 1

    def hostile_round(self) -> Counter:
        c, h, now = self.client, self.headers, self.now()
        lease = {"shape": "a100.x1", "duration": "PT1H"}
        far = rfc3339(now + 300 * DAY)
        self._note("duration of 3,000,000 days",
                   c.post("/v1/leases", json={**lease, "duration": "P3000000D"}, headers=h))
        self._note("start in year 9998", c.post("/v1/leases", json={**lease, "start": "9998-12-31T00:00:00Z",
                                                                    "duration": "P700D"}, headers=h))
        self._note("dry run in year 9998", c.post("/v1/leases", query_string={"dry_run": "true"},
                                                  json={**lease, "start": "9998-12-31T00:00:00Z"}, headers=h))
        self._note("body nested 50,000 deep", c.post("/v1/leases", data=nested(50_000), headers=h,
                                                     content_type="application/json"))
        self._note("NaN in a body", c.post("/v1/leases", data=b'{"shape": "a100.x1", "duration": NaN}',
                                           headers=h, content_type="application/json"))
        self._note("another project's volume", c.post("/v1/leases", json={**lease, "volume": {
            "id": "00000000-0000-0000-0000-00000000beef"}}, headers=h))
        # waiting leases up to the cap and past it: a formula for a name, far ahead
        made = c.post("/v1/leases", json={**lease, "name": f"=HYPERLINK(\"http://x\",\"{len(self.own_leases)}\")",
                                          "start": far}, headers={**h, "X-Forwarded-For": "203.0.113.66"})
        self._note("a waiting lease (capped)", made)
        if made.status_code == 201:
            self.own_leases.append(made.get_json()["lease"]["id"])
        if self.own_leases:
            self._note("extend by 3,000,000 days", c.patch(f"/v1/leases/{self.own_leases[0]}",
                                                           json={"duration": "P3000000D"}, headers=h))
        self._note("/metrics as a member", c.get("/metrics", headers=h))
        self._note("another project's leases", c.get("/v1/leases", query_string={"all_projects": "true"},
                                                     headers=h))
        if self.receiver is not None:
            self._note("a slow webhook receiver", c.put(f"/v1/webhooks/{h['X-Project-Id']}", headers=h, json={
                "webhook": {"url": f"http://127.0.0.1:{self.receiver.port}/hook"}}))
        return self.statuses

    def loop(self, seconds: float, max_rounds: int) -> int:
        """Rounds until `seconds` have passed or `max_rounds` were sent; returns the rounds."""
        deadline, rounds = time.monotonic() + seconds, 0
        while rounds < max_rounds and time.monotonic() < deadline:
            self.hostile_round()
            rounds += 1
        return rounds


VICTIM = headers("ml-vision", user="alice")
HOSTILE = headers("nlp-lab", user="mallory")

# (seconds after T0, the lease ml-vision asks for): A100 only; the hostile tenant's one
# running lease is an H100, so that without its hostility the two would not meet.
VICTIM_ASKS: list[tuple[int, dict[str, Any]]] = [
    (0, {"name": "v-gang", "shape": "a100.x8", "instances": 2, "duration": "PT2H"}),
    (60, {"name": "v-borrow", "shape": "a100.x4", "duration": "PT1H"}),
    (120, {"name": "v-waits", "shape": "a100.x8", "duration": "PT1H"}),
    (180, {"name": "v-later", "shape": "a100.x2", "duration": "PT30M", "start": "2026-12-01T09:30:00Z"}),
    (240, {"name": "v-queue", "shape": "a100.x8", "instances": 2, "duration": "PT1H"}),
]
END = T0 + 5 * 3600


def victim_run(client, runtime, hostile: HostileTenant | None) -> tuple[dict, list[float]]:
    """ml-vision's asks, with a tick a virtual minute apart until END; the hostile tenant,
    if any, sends a round after every tick. Returns what ml-vision was told and saw of each
    lease, and each tick's wall time."""
    clock, ticks = runtime.clock, []

    def tick(advance: int) -> None:
        clock.advance(advance)
        began = time.perf_counter()
        runtime.engine.run_once()
        ticks.append(time.perf_counter() - began)
        runtime.engine.outbox.run_once()   # hands notices to its own threads; the tick does not wait
        if hostile:
            hostile.hostile_round()

    if hostile:   # its one running lease, on the H100s, is warned at once (it ends within the hour)
        made = client.post("/v1/leases", json={"shape": "h100.x1", "duration": "PT30M"}, headers=HOSTILE)
        assert made.status_code == 201, made.get_json()
    asked, told = {}, {}
    for at, body in VICTIM_ASKS:
        if clock.now() < T0 + at:
            tick(T0 + at - clock.now())
        answer = client.post("/v1/leases", json=body, headers=VICTIM)
        assert answer.status_code == 201, answer.get_json()
        lease = answer.get_json()["lease"]
        asked[body["name"]] = lease["id"]
        told[body["name"]] = (lease["status"], (lease["queue"] or {}).get("eta"), lease["start"])
        tick(0)
    while clock.now() < END:
        tick(60)
    seen = {}
    for name, lease_id in asked.items():
        lease = client.get(f"/v1/leases/{lease_id}", headers=VICTIM).get_json()["lease"]
        seen[name] = (*told[name], lease["status"], lease["start"], lease["end"])
    return seen, ticks


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


def build_runtime(url: str, clock: VirtualClock | None = None):
    """The app on a migrated database, with the demo catalog, the engine built but not started."""
    clock = clock or VirtualClock(T0)
    # the slow receiver is on 127.0.0.1, which webhooks may reach only when allowed
    config = Config.load(database_url=url, auth_strategy="noauth2", run_engine=True,
                         webhook_allowed_networks=["127.0.0.1/32"], webhook_timeout_seconds=1.0,
                         max_waiting_leases_per_user=10)
    app = create_app(config, clock=clock, cloud=SimulatedCloud.from_file(DEMO_CLOUD, clock), start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, clock.now(), runtime.cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    return app, runtime

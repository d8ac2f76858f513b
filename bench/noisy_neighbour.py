"""The engine's tick beside a hostile tenant, under real concurrency (issue 15).

Two runs of the same ml-vision workload (tests/hostile_tenant.py: five leases, a tick
each virtual minute for five hours, then more ticks while the hostile loop lasts), each
on a fresh database: with nlp-lab's members sending every hostile request in a loop for
--seconds of wall time (bounded by --max-rounds) to the API served by gunicorn (gthread)
on 127.0.0.1 over the same database, as API workers are deployed apart from the engine;
then quiet, with as many ticks. Prints the tick's P50/P99 wall time of both runs side by
side, their ratio, what ml-vision saw in both (equal, or the differences), and the
hostile requests' answers. Starts one gunicorn and stops it by its PID.

    python bench/noisy_neighbour.py [--seconds 60] [--threads 2] [--database-url postgresql+psycopg://...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time

import requests
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests.*
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))                    # api_load

from api_load import start_gunicorn, stop  # noqa: E402
from gpu_tenancy.clock import VirtualClock  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.conftest import T0  # noqa: E402
from tests.hostile_tenant import (HOSTILE, HostileTenant, TricklingReceiver, build_runtime, p99,  # noqa: E402
                                  victim_run)


class SharedClock(VirtualClock):
    """The engine's virtual clock, written to a file at each move for the API processes
    (bench/noisy_api.py): every process plans at the same now, as with one wall clock."""

    def __init__(self, start: int, path: str):
        self.path = path
        super().__init__(start)
        self._write()

    def _write(self) -> None:
        with open(self.path + ".new", "wb") as f:
            f.write(struct.pack("<q", self._now))
        os.replace(self.path + ".new", self.path)   # readers never see half a value

    def advance(self, seconds: int) -> int:
        now = super().advance(seconds)
        self._write()
        return now

    def set(self, t: int) -> None:
        super().set(t)
        self._write()


def fresh_database(base: str | None, workdir: str, name: str) -> str:
    if base is None:
        url = f"sqlite:///{workdir}/{name}.db"
    else:   # a database of its own on the given server
        from sqlalchemy import create_engine, text
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "gt_noisy_{name}"'))
            conn.execute(text(f'CREATE DATABASE "gt_noisy_{name}"'))
        admin.dispose()
        url = base.rsplit("/", 1)[0] + f"/gt_noisy_{name}"
    migrate.upgrade(url)
    return url


class Answer:
    def __init__(self, response: requests.Response):
        self.status_code, self._response = response.status_code, response

    def get_json(self):
        return self._response.json()


class HttpClient:
    """What HostileTenant asks of a Flask test client, over HTTP."""

    def __init__(self, base: str):
        self.base, self.session = base, requests.Session()

    def _send(self, method, path, json=None, data=None, headers=None, query_string=None, content_type=None):
        headers = {**(headers or {}), **({"Content-Type": content_type} if content_type else {})}
        return Answer(self.session.request(method, self.base + path, json=json, data=data, headers=headers,
                                           params=query_string, timeout=60))

    def get(self, path, **kw):
        return self._send("GET", path, **kw)

    def post(self, path, **kw):
        return self._send("POST", path, **kw)

    def put(self, path, **kw):
        return self._send("PUT", path, **kw)

    def patch(self, path, **kw):
        return self._send("PATCH", path, **kw)


def serve_api(url: str, workdir: str) -> tuple:
    """gunicorn (gthread) with the API alone over `url`, on a free port of 127.0.0.1."""
    config = os.path.join(workdir, "api.yaml")
    with open(config, "w") as f:
        yaml.safe_dump({"database_url": url, "auth_strategy": "noauth2", "allow_noauth2": True,
                        "run_engine": False, "max_waiting_leases_per_user": 10,
                        "webhook_allowed_networks": ["127.0.0.1/32"]}, f)
    port = free_port()
    proc = start_gunicorn("noisy_api:application", port, {"GPU_TENANCY_CONFIG": config,
                                                           "BENCH_CLOCK_FILE": os.path.join(workdir, "clock")}, 2,
                          os.path.join(workdir, "gunicorn.log"), extra=["-k", "gthread", "--threads", "4"])
    return proc, f"http://127.0.0.1:{port}"


def one_run(url: str, seconds: float, threads: int, max_rounds: int, extra_ticks: int | None = None,
            api: str | None = None, clock: VirtualClock | None = None):
    """ml-vision's workload, then ticks a virtual minute apart while the hostile loop runs
    (or `extra_ticks` of them, so that the quiet run ticks as often as the noisy one)."""
    app, runtime = build_runtime(url, clock)
    receiver = TricklingReceiver(gap=0.5) if threads else None
    tenants: list[HostileTenant] = []
    if threads:   # the noisy run: its hostile members send to the API served at `api`
        assert api is not None
        tenants = [HostileTenant(HttpClient(api), {**HOSTILE, "X-User-Id": f"mallory-{n}"}, runtime.clock.now,
                                 receiver) for n in range(threads)]
    workers = [threading.Thread(target=t.loop, args=(seconds, max_rounds), daemon=True) for t in tenants]
    began = time.monotonic()
    for w in workers:
        w.start()
    try:
        seen, ticks = victim_run(app.test_client(), runtime, None)
        workload = len(ticks)
        while (any(w.is_alive() for w in workers) if extra_ticks is None else len(ticks) - workload < extra_ticks):
            runtime.clock.advance(60)
            start = time.perf_counter()
            runtime.engine.run_once()
            ticks.append(time.perf_counter() - start)
        for w in workers:
            w.join()
    finally:
        if receiver:
            receiver.close()
        runtime.engine.outbox.stop()
        runtime.sessions.kw["bind"].dispose()
    return seen, ticks, time.monotonic() - began, tenants, len(ticks) - workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the hostile loop runs")
    parser.add_argument("--threads", type=int, default=2, help="hostile members sending at once")
    parser.add_argument("--max-rounds", type=int, default=100_000, help="at most this many rounds per member")
    parser.add_argument("--database-url", help="a PostgreSQL server URL (default: SQLite files)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gt-noisy-") as workdir:
        url = fresh_database(args.database_url, workdir, "noisy")
        clock = SharedClock(T0, os.path.join(workdir, "clock"))
        gunicorn, api = serve_api(url, workdir)
        try:
            noisy, noisy_ticks, noisy_wall, tenants, extra = one_run(url, args.seconds, args.threads,
                                                                     args.max_rounds, api=api, clock=clock)
        finally:
            stop(gunicorn)
        quiet, quiet_ticks, quiet_wall, _, _ = one_run(fresh_database(args.database_url, workdir, "quiet"),
                                                        0, 0, 0, extra_ticks=extra)
    rounds = sum(sum(t.statuses.values()) for t in tenants)
    print(f"{'run':<24}{'ticks':>7}{'P50 ms':>9}{'P99 ms':>9}{'max ms':>9}{'wall s':>8}")
    for name, ticks, wall in (("quiet", quiet_ticks, quiet_wall), ("beside hostile tenant", noisy_ticks, noisy_wall)):
        print(f"{name:<24}{len(ticks):>7}{statistics.median(ticks) * 1000:>9.1f}{p99(ticks) * 1000:>9.1f}"
              f"{max(ticks) * 1000:>9.1f}{wall:>8.1f}")
    print(f"P99 ratio (hostile / quiet): {p99(noisy_ticks) / p99(quiet_ticks):.2f}; "
          f"P99 under 1 s beside it: {'yes' if p99(noisy_ticks) < 1 else 'NO'}")
    print(f"hostile requests sent: {rounds} by {len(tenants)} member(s)")
    answers: dict = {}
    for t in tenants:
        for (what, status), count in t.statuses.items():
            answers[(what, status)] = answers.get((what, status), 0) + count
    for (what, status), count in sorted(answers.items()):
        print(f"  {what}: {status} x {count}")
    if quiet == noisy:
        print("ml-vision's leases: the same answers, ETAs and starts in both runs")
    else:
        print("ml-vision's leases DIFFER:")
        for name in quiet:
            if quiet[name] != noisy.get(name):
                print(f"  {name}: quiet {quiet[name]} / beside it {noisy.get(name)}")
        sys.exit(1)


if __name__ == "__main__":
    main()

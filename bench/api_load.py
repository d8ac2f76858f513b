"""API under load: lease creation and listing through gunicorn (4 sync
workers) on PostgreSQL, side by side with a bare Flask endpoint
(bench/bare_app.py: one INSERT, or one page SELECT) on the same database and
the same gunicorn. Prints figures; asserts nothing.

    python bench/api_load.py [--port 0] [--seconds 20] [--clients 8]

It starts its own throwaway PostgreSQL (as scripts/run-tests does; initdb
must be installed) and two gunicorns on 127.0.0.1, and stops them by PID.
The service runs with auth noauth2 (a Keystone token check is a cache hit
in steady state, not what is measured here) and no engine in the workers,
as in production. The cloud is simulated: --hosts hosts of 8 A100. Leases
ask for 1, 2, 4 or 8 GPUs for 1 to 24 h from --projects projects, so the
cluster fills and the queue then grows during the create phase: a
create replans the whole queue under the ledger lock unless a replan that
ran meanwhile has planned its lease, and the table says how long the queue
was at the end and how many creates ran a replan. Before the list phase each
project is given a full page of leases (untimed), as the bare SELECT reads a
full page.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))

import requests  # noqa: E402
import yaml  # noqa: E402
from sqlalchemy import create_engine, func, select, text  # noqa: E402

from planner_scale import machine  # noqa: E402
from throwaway_pg import ThrowawayPostgres  # noqa: E402

BARE_SCHEMA = "CREATE TABLE bench_bare (id bigserial PRIMARY KEY, project text, body text)"
SHAPES = ("a100.x1", "a100.x2", "a100.x4", "a100.x8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] if xs else float("nan")


def prepare_service_db(url: str, workdir: str, n_hosts: int, projects: list[str]) -> str:
    """Schema, catalog, quotas and hosts; returns the service's config file."""
    from gpu_tenancy.app import create_app
    from gpu_tenancy.config import Config
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import session_scope, utcnow_naive
    from gpu_tenancy.demo.seed import seed

    cloud_file = os.path.join(workdir, "cloud.yaml")
    with open(cloud_file, "w") as f:
        yaml.safe_dump({"boot_seconds": 20, "delete_seconds": 5,
                        "gpu_models": {"A100": {"resource_class": "CUSTOM_PGPU_A100", "pci_alias": "a100"}},
                        "hosts": [{"prefix": "gpu-a100-", "count": n_hosts, "gpu_model": "A100", "gpus": 8,
                                   "aggregate": "a100"}],
                        "images": [{"id": "0b7c3a4e-1d2f-4c5a-9e8b-22c0da000001", "name": "ubuntu-22.04-cuda-12",
                                    "status": "active"}]}, f)
    config_file = os.path.join(workdir, "service.yaml")
    with open(config_file, "w") as f:
        yaml.safe_dump({"database_url": url, "auth_strategy": "noauth2", "allow_noauth2": True,
                        "run_engine": False, "simulated_cloud": cloud_file,
                        # the create phase queues hundreds per project, as before the caps: like with like
                        "max_waiting_leases_per_project": 10**6, "max_waiting_leases_per_user": 10**6}, f)
    migrate.upgrade(url)
    app = create_app(Config.load(config_file, run_engine=True), start_engine=False)
    rt = app.extensions["gpu_tenancy"]
    with session_scope(rt.sessions) as s:
        now = rt.clock.now()
        seed(s, now, rt.cloud.images())
        for p in projects:
            s.add(m.Quota(project_id=p, gpu_model="A100", gpus=8 * n_hosts, borrow_gpus=0,
                          max_duration=None, weight=1.0, updated_at=utcnow_naive(now)))
    rt.engine.lifecycle.refresh_hosts()
    rt.sessions.kw["bind"].dispose()
    return config_file


def start_gunicorn(app: str, port: int, env: dict, workers: int, log: str,
                   extra: list[str] = ()) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gunicorn", "-w", str(workers), "-b", f"127.0.0.1:{port}",
           "--chdir", HERE, "--log-level", "warning", *extra, app]
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=5)
            return proc
        except requests.RequestException:
            if proc.poll() is not None:
                raise SystemExit(f"gunicorn {app} exited; see {log}") from None
            time.sleep(0.3)
    stop(proc)   # never leave a server behind
    raise SystemExit(f"gunicorn {app} did not answer; see {log}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def hammer(make_request, seconds: float, clients: int) -> dict:
    """`clients` threads send requests back to back for `seconds`; latencies
    of the successful ones, and the count of the others."""
    lat: list[float] = []
    bad: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def run(k):
        session = requests.Session()
        rng = random.Random(k)
        i = 0
        while time.perf_counter() < stop_at:
            t = time.perf_counter()
            r = make_request(session, rng, k, i)
            dt = time.perf_counter() - t
            with lock:
                (lat.append(dt) if r.status_code < 300 else bad.append(f"{r.status_code} {r.text[:200]}"))
            i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    return {"ok": len(lat), "bad": len(bad), "first_bad": bad[:1], "rps": len(lat) / wall,
            "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "mean": statistics.fmean(lat) if lat else float("nan")}


def create_replans(metrics_dir: str) -> dict:
    """gpu_tenancy_lease_create_replans_total of every worker (prometheus_client's multiprocess files)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)
    return {outcome: registry.get_sample_value("gpu_tenancy_lease_create_replans_total", {"outcome": outcome}) or 0
            for outcome in ("replanned", "shared")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="first of three ports (PostgreSQL, service, bare); 0: any free")
    ap.add_argument("--pg-bin", help="PostgreSQL's bin directory (default: the newest under /usr/lib/postgresql)")
    ap.add_argument("--seconds", type=float, default=20, help="per phase")
    ap.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    ap.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    ap.add_argument("--hosts", type=int, default=100, help="simulated hosts of 8 A100")
    ap.add_argument("--projects", type=int, default=8)
    ap.add_argument("--page", type=int, default=50, help="page size of the list phases")
    a = ap.parse_args(argv)
    ports = [a.port, a.port + 1, a.port + 2] if a.port else [free_port(), free_port(), free_port()]
    projects = [f"bench-{i}" for i in range(a.projects)]
    workdir = tempfile.mkdtemp(prefix="gt-bench-api-")
    print(machine())
    print(f"gunicorn {a.workers} sync workers each; {a.clients} client threads in one process; "
          f"{a.seconds:g} s per phase; PostgreSQL (fsync off) on 127.0.0.1; simulated cloud {a.hosts} x 8 A100",
          flush=True)
    procs = []
    with ThrowawayPostgres(ports[0], a.pg_bin) as pg:
        try:
            config_file = prepare_service_db(pg.url, workdir, a.hosts, projects)
            db = create_engine(pg.url)
            with db.begin() as conn:
                conn.execute(text(BARE_SCHEMA))
            svc = f"http://127.0.0.1:{ports[1]}"
            bare = f"http://127.0.0.1:{ports[2]}"
            metrics_dir = os.path.join(workdir, "metrics")   # the workers' counters, added up below
            os.makedirs(metrics_dir)
            procs.append(start_gunicorn("gpu_tenancy.wsgi:application", ports[1],
                                        {"GPU_TENANCY_CONFIG": config_file, "PROMETHEUS_MULTIPROC_DIR": metrics_dir},
                                        a.workers,
                                        os.path.join(workdir, "service.log")))
            procs.append(start_gunicorn("bare_app:application", ports[2], {"BENCH_BARE_DB": pg.url}, a.workers,
                                        os.path.join(workdir, "bare.log")))

            def headers(k):
                return {"X-Project-Id": projects[k % len(projects)], "X-User-Id": f"u{k}", "X-Roles": "member"}

            def lease_create(session, rng, k, i):
                return session.post(f"{svc}/v1/leases", headers=headers(k), json={
                    "name": f"bench-{k}-{i}", "shape": rng.choice(SHAPES), "duration": rng.randint(1, 24) * 3600})

            def bare_insert(session, rng, k, i):
                return session.post(f"{bare}/bare", headers=headers(k), json={
                    "name": f"bench-{k}-{i}", "shape": rng.choice(SHAPES), "duration": rng.randint(1, 24) * 3600})

            def lease_list(session, rng, k, i):
                return session.get(f"{svc}/v1/leases", params={"limit": a.page}, headers=headers(k))

            def bare_list(session, rng, k, i):
                return session.get(f"{bare}/bare", params={"limit": a.page}, headers=headers(k))

            def fill_pages():
                """Untimed, before the list phases: every project gets a full page of leases, as
                the bare SELECT reads a full page (the create phase leaves fewer per project)."""
                session, rng = requests.Session(), random.Random(0)
                for k in range(len(projects)):
                    have = len(lease_list(session, rng, k, 0).json()["leases"])
                    for i in range(have, a.page):
                        made = lease_create(session, rng, k, 10**6 + i)
                        if made.status_code != 201:
                            raise SystemExit(f"filling the pages: {made.status_code} {made.text[:200]}")

            from gpu_tenancy.db import models as m
            rows = []
            for label, fn in (("bare INSERT (POST /bare)", bare_insert),
                              ("POST /v1/leases", lease_create),
                              (f"bare SELECT page of {a.page} (GET /bare)", bare_list),
                              (f"GET /v1/leases?limit={a.page}", lease_list)):
                if fn is lease_list:   # what the create phase did, then the pages filled
                    replans = create_replans(metrics_dir)
                    with db.connect() as conn:
                        by_status = dict(conn.execute(select(m.Lease.status, func.count())
                                                      .group_by(m.Lease.status)).all())
                    fill_pages()
                r = hammer(fn, a.seconds, a.clients)
                rows.append((label, r))
                print(f"  {label}: {r['rps']:.1f} req/s, p50 {1000 * r['p50']:.0f} ms, p99 {1000 * r['p99']:.0f} ms, "
                      f"{r['ok']} ok, {r['bad']} failed {r['first_bad']}", flush=True)
            db.dispose()
        except BaseException:
            print(f"the gunicorn logs are kept in {workdir}", file=sys.stderr)
            raise
        finally:
            for p in procs:
                stop(p)
    shutil.rmtree(workdir, ignore_errors=True)   # kept above only when the run failed
    print()
    print("| endpoint | req/s | p50 | p99 | ÷ bare req/s |")
    print("|---|---|---|---|---|")
    for idx, (label, r) in enumerate(rows):
        ref = rows[idx - 1][1] if idx % 2 else r
        print(f"| {label} | {r['rps']:.1f} | {1000 * r['p50']:.0f} ms | {1000 * r['p99']:.0f} ms "
              f"| {r['rps'] / ref['rps']:.2f} |")
    print(f"\nleases at the end of the create phase, by status: {by_status}")
    print("creates that ran the replan: {replanned:.0f}; whose lease another request's replan planned: "
          "{shared:.0f}".format(**replans))
    return 0


if __name__ == "__main__":
    sys.exit(main())

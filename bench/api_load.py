"""API under load: lease creation and listing through gunicorn (4 sync
workers) on PostgreSQL, side by side with a bare Flask endpoint
(bench/bare_app.py: one INSERT, or one page SELECT) on the same database and
the same gunicorn. Prints figures; asserts nothing.

    python bench/api_load.py [--port 0] [--seconds 20] [--clients 8]
    python bench/api_load.py --waiting 1000,10000 --against main [--seconds 20] [--floor]

With --waiting, the create phase alone, once per queue length: each starts from a
database with that many leases waiting (cloned in SQL from one made through the API, then
planned by one full replan, untimed), and with --against the same with a git ref's code
(its own database and gunicorn), one after the other in one run, each right after a phase
of the bare INSERT (the ratio is to that one: the machine's load moves between phases).
Each phase also prints the CPU a request cost in the client, the gunicorn workers and
PostgreSQL (bench/process_cpu.py): which of them a create's difference from the bare
INSERT is in. With --floor, each create phase is followed by the create's SQL statements
alone (bench/floor_app.py: one create's statements caught and run again with new ids), beside
the bare INSERT again: what a create would cost if all its Python but the driver's were free.

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
import ast
import contextlib
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
from collections.abc import Iterator, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the service's code: this tree's, or (GT_BENCH_SERVICE) a git ref's exported for --against
SERVICE = os.environ.get("GT_BENCH_SERVICE", os.path.join(HERE, "..", "service"))
sys.path.insert(0, SERVICE)

import requests  # noqa: E402
import yaml  # noqa: E402
from sqlalchemy import create_engine, func, select, text  # noqa: E402

from git_export import export_ref  # noqa: E402
from planner_scale import machine  # noqa: E402
from process_cpu import own_cpu, tree_cpu  # noqa: E402
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


def write_cloud_file(workdir: str, n_hosts: int) -> str:
    """The simulated cloud's file: n_hosts hosts of 8 A100 and the demo image (also bench/member_costs.py)."""
    cloud_file = os.path.join(workdir, "cloud.yaml")
    with open(cloud_file, "w") as f:
        yaml.safe_dump({"boot_seconds": 20, "delete_seconds": 5,
                        "gpu_models": {"A100": {"resource_class": "CUSTOM_PGPU_A100", "pci_alias": "a100"}},
                        "hosts": [{"prefix": "gpu-a100-", "count": n_hosts, "gpu_model": "A100", "gpus": 8,
                                   "aggregate": "a100"}],
                        "images": [{"id": "0b7c3a4e-1d2f-4c5a-9e8b-22c0da000001", "name": "ubuntu-22.04-cuda-12",
                                    "status": "active"}]}, f)
    return cloud_file


def prepare_service_db(url: str, workdir: str, n_hosts: int, projects: list[str]) -> str:
    """Schema, catalog, quotas and hosts; returns the service's config file."""
    from gpu_tenancy.app import create_app
    from gpu_tenancy.config import Config
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import session_scope, utcnow_naive
    from gpu_tenancy.demo.seed import seed

    cloud_file = write_cloud_file(workdir, n_hosts)
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


def clone_waiting(url: str, config_file: str, n_hosts: int, n_projects: int, waiting: int) -> dict:
    """`waiting` leases queued behind a full cluster: one lease made through the API, cloned in
    SQL (n_hosts of 8 GPUs for 24 h first, which the replan starts, then shapes and durations
    in turn over the projects), then one full replan, as the engine would run. Untimed."""
    from gpu_tenancy.app import create_app
    from gpu_tenancy.config import Config
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import session_scope
    from gpu_tenancy.engine import ledger

    app = create_app(Config.load(config_file, run_engine=True), start_engine=False)
    rt = app.extensions["gpu_tenancy"]
    made = app.test_client().post("/v1/leases", json={"name": "template", "shape": "a100.x8", "duration": 3600},
                                  headers={"X-Project-Id": "bench-0", "X-User-Id": "u0", "X-Roles": "member"})
    assert made.status_code == 201, made.get_data(as_text=True)
    template = made.get_json()["lease"]["id"]
    engine = rt.sessions.kw["bind"]
    with engine.begin() as conn:
        columns = [c for (c,) in conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'leases' ORDER BY ordinal_position"))]
        fill = n_hosts   # whole hosts for a day: the cluster is full, the rest waits
        over = {
            "id": "md5(random()::text || g::text)::uuid::text", "name": "'fill-' || g", "status": "'queued'",
            "project_id": f"'bench-' || (g % {n_projects})",
            "shape": f"CASE WHEN g <= {fill} THEN 'a100.x8' ELSE (ARRAY['a100.x1','a100.x2','a100.x4','a100.x8'])"
                     "[1 + g % 4] END",
            "gpus_per_vm": f"CASE WHEN g <= {fill} THEN 8 ELSE (ARRAY[1,2,4,8])[1 + g % 4] END",
            "duration": f"CASE WHEN g <= {fill} THEN 86400 ELSE 3600 * (1 + (g * 7) % 24) END",
            "arrival": "arrival + g", "start_at": "NULL", "end_at": "NULL", "queue_position": "NULL",
            "queue_eta": "NULL", "queue_reasons": "'[]'", "first_eta": "NULL", "planned_hosts": "NULL",
            "plan_seq": "NULL", "readiness_token": "NULL"}
        picks = ", ".join(over.get(c, c) for c in columns)
        conn.execute(text(f"INSERT INTO leases ({', '.join(columns)}) SELECT {picks} FROM leases, "
                          f"generate_series(1, {fill + waiting}) AS g WHERE id = :template"), {"template": template})
        # the statistics a deployment's database has (autovacuum's first pass would come after the
        # phase): planned for a near-empty table, a create's checks scanned all of a project's leases
        conn.execute(text("ANALYZE"))
    t = time.perf_counter()
    with session_scope(rt.sessions) as session:
        ledger.replan(session, rt.clock.now(), rt.planner_settings)
        by_status = dict(session.execute(select(m.Lease.status, func.count()).group_by(m.Lease.status)).all())
    engine.dispose()
    return {"by_status": by_status, "replan_s": time.perf_counter() - t}


def start_gunicorn(app: str, port: int, env: dict, workers: int, log: str,
                   extra: Sequence[str] = ()) -> subprocess.Popen:
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


@contextlib.contextmanager
def gunicorns(workdir: str) -> Iterator[list[subprocess.Popen]]:
    """A list to put the started gunicorns in: each is stopped at the end, however the run
    ends; when it fails, their logs are kept in `workdir` (and said where)."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    except BaseException:
        print(f"the gunicorn logs are kept in {workdir}", file=sys.stderr)
        raise
    finally:
        for p in procs:
            stop(p)


def identity(projects: list[str], k: int) -> dict:
    """Client k's headers (noauth2): the projects in turn."""
    return {"X-Project-Id": projects[k % len(projects)], "X-User-Id": f"u{k}", "X-Roles": "member"}


def ask(rng: random.Random, k: int, i: int) -> dict:
    """Client k's i-th lease: a random shape for 1 to 24 hours (the bare app takes the same body)."""
    return {"name": f"bench-{k}-{i}", "shape": rng.choice(SHAPES), "duration": rng.randint(1, 24) * 3600}


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def hammer(make_request, seconds: float, clients: int, servers: dict[str, int] | None = None) -> dict:
    """`clients` threads send requests back to back for `seconds`; latencies
    of the successful ones, and the count of the others; with `servers` (a name
    and the pid whose process tree it is), the CPU each, and this client, used
    per successful request ("cpu_ms")."""
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

    servers = servers or {}
    cpu0 = {"client": own_cpu(), **{name: tree_cpu(pid) for name, pid in servers.items()}}
    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    cpu1 = {"client": own_cpu(), **{name: tree_cpu(pid) for name, pid in servers.items()}}
    return {"ok": len(lat), "bad": len(bad), "first_bad": bad[:1], "rps": len(lat) / wall,
            "cpu_ms": {name: 1000 * (cpu1[name] - cpu0[name]) / max(1, len(lat)) for name in cpu0},
            "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "mean": statistics.fmean(lat) if lat else float("nan")}


SPLIT = "client / workers / PostgreSQL"


def cpu_split(r: dict) -> str:
    """The CPU a request cost, in ms: the client's, the gunicorn workers' and PostgreSQL's, and
    their sum. With every core busy, a phase's req/s is about 1,000 x cores over the sum."""
    ms = r["cpu_ms"]
    parts = [ms["client"], ms.get("workers", float("nan")), ms.get("PostgreSQL", float("nan"))]
    return " / ".join(f"{v:.2f}" for v in parts) + f" = {sum(parts):.2f}"


def create_outcomes(metrics_dir: str) -> dict:
    """create_replans with the creates fitted into the plan (none with code from before that)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)
    return {outcome: registry.get_sample_value("gpu_tenancy_lease_create_replans_total", {"outcome": outcome}) or 0
            for outcome in ("fitted", "replanned", "shared")}


def create_replans(metrics_dir: str) -> dict:
    """gpu_tenancy_lease_create_replans_total of every worker (prometheus_client's multiprocess files)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)
    return {outcome: registry.get_sample_value("gpu_tenancy_lease_create_replans_total", {"outcome": outcome}) or 0
            for outcome in ("replanned", "shared")}


def prepare_waiting(code: str, url: str, workdir: str, a, projects: list[str], waiting: int) -> tuple[str, dict]:
    """In a process of `code`'s service (its migrations, its replan): a database with `waiting`
    leases waiting; returns its config file and what clone_waiting says."""
    env = {**os.environ, "GT_BENCH_SERVICE": code, "PYTHONPATH": code}
    out = subprocess.run([sys.executable, __file__, "--prepare", url, "--prepare-dir", workdir, "--hosts", str(a.hosts),
                          "--projects", str(len(projects)), "--waiting", str(waiting)],
                         env=env, check=True, capture_output=True, text=True)
    config_file, figures = out.stdout.strip().splitlines()[-2:]
    return config_file, ast.literal_eval(figures)   # a dict this script printed


def prepare_main(a) -> int:
    """--prepare: run in a process of the code measured (see prepare_waiting)."""
    projects = [f"bench-{i}" for i in range(a.projects)]
    config_file = prepare_service_db(a.prepare, a.prepare_dir, a.hosts, projects)
    figures = clone_waiting(a.prepare, config_file, a.hosts, len(projects), int(a.waiting))
    print(config_file)
    print(repr(figures))
    return 0


def waiting_main(a, ports: list[int], projects: list[str], workdir: str) -> int:
    """--waiting: the create phase with each queue length, this tree's code and --against's, beside the bare INSERT."""
    codes = [("new", os.path.abspath(SERVICE))]
    if a.against:
        ref_dir = export_ref(a.against, os.path.join(workdir, "ref"), ("service",))
        codes.insert(0, (f"{a.against}", os.path.join(ref_dir, "service")))
    rows: list[tuple] = []   # the bare INSERT alone first, then (code, waiting, bare, creates, outcomes) a phase
    floors: list[tuple] = []
    with ThrowawayPostgres(ports[0], a.pg_bin) as pg, gunicorns(workdir) as procs:
        db = create_engine(pg.url, isolation_level="AUTOCOMMIT")
        with db.connect() as conn:
            conn.execute(text(BARE_SCHEMA))
        bare = start_gunicorn("bare_app:application", ports[2], {"BENCH_BARE_DB": pg.url}, a.workers,
                              os.path.join(workdir, "bare.log"))
        procs.append(bare)

        def headers(k):
            return identity(projects, k)

        def bare_insert(session, rng, k, i):
            return session.post(f"http://127.0.0.1:{ports[2]}/bare", headers=headers(k), json=ask(rng, k, i))

        r = hammer(bare_insert, a.seconds, a.clients, {"workers": bare.pid, "PostgreSQL": pg.pid})
        rows.append(("bare INSERT", "", "", r, None))
        print(f"  bare INSERT: {r['rps']:.1f} req/s, p99 {1000 * r['p99']:.0f} ms, CPU per request {cpu_split(r)}",
              flush=True)
        for n in [int(x) for x in a.waiting.split(",")]:
            for label, code in codes:
                name = f"db_{label.replace('-', '_').replace('/', '_')}_{n}".lower()
                with db.connect() as conn:
                    conn.execute(text(f"CREATE DATABASE {name}"))
                url = pg.url.rsplit("/", 1)[0] + "/" + name
                phase_dir = os.path.join(workdir, name)
                os.makedirs(os.path.join(phase_dir, "metrics"))
                config_file, figures = prepare_waiting(code, url, phase_dir, a, projects, n)
                svc = start_gunicorn("gpu_tenancy.wsgi:application", ports[1],
                                     {"GPU_TENANCY_CONFIG": config_file, "PYTHONPATH": code,
                                      "PROMETHEUS_MULTIPROC_DIR": os.path.join(phase_dir, "metrics")},
                                     a.workers, os.path.join(phase_dir, "service.log"))
                procs.append(svc)

                def lease_create(session, rng, k, i):
                    return session.post(f"http://127.0.0.1:{ports[1]}/v1/leases", headers=headers(k), json=ask(rng, k, i))

                # the bare INSERT again just before: the machine's load moves between phases
                b = hammer(bare_insert, a.seconds, a.clients, {"workers": bare.pid, "PostgreSQL": pg.pid})
                r = hammer(lease_create, a.seconds, a.clients, {"workers": svc.pid, "PostgreSQL": pg.pid})
                stop(svc)
                procs.remove(svc)
                outcomes = create_outcomes(os.path.join(phase_dir, "metrics"))
                rows.append((label, n, b, r, outcomes))
                if a.floor:
                    floors.append((label, n, *floor_phase(a, ports, pg, code, config_file, phase_dir, bare_insert,
                                                          bare.pid, headers)))
                print(f"  {label}, {n} waiting (set up: {figures['by_status']}, replan {figures['replan_s']:.1f} s): "
                      f"{r['rps']:.1f} req/s, p50 {1000 * r['p50']:.0f} ms, p99 {1000 * r['p99']:.0f} ms, "
                      f"{r['ok']} ok, {r['bad']} failed {r['first_bad']}; {outcomes}; CPU per create {cpu_split(r)}; "
                      f"bare INSERT just before {b['rps']:.1f} req/s, CPU per request {cpu_split(b)}", flush=True)
        db.dispose()
    shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("| code | waiting | POST /v1/leases req/s | p50 | p99 | bare INSERT just before, req/s | ÷ bare "
          f"| creates fitted / replanned / shared | CPU ms per create ({SPLIT}) | per bare INSERT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, n, b, r, outcomes in rows[1:]:
        print(f"| {label} | {n:,} | {r['rps']:.1f} | {1000 * r['p50']:.0f} ms | {1000 * r['p99']:.0f} ms "
              f"| {b['rps']:.1f} | {r['rps'] / b['rps']:.2f} | {outcomes['fitted']:.0f} / {outcomes['replanned']:.0f} / "
              f"{outcomes['shared']:.0f} | {cpu_split(r)} | {cpu_split(b)} |")
    print(f"\nbare INSERT at the start: {rows[0][3]['rps']:.1f} req/s (p99 {1000 * rows[0][3]['p99']:.0f} ms)")
    if floors:
        print("\nThe floor: a create's SQL statements alone (bench/floor_app.py), after the create phase")
        print(f"| code | waiting | floor req/s | bare INSERT just before, req/s | ÷ bare | CPU ms a request ({SPLIT}) |")
        print("|---|---|---|---|---|---|")
        for label, n, b, f in floors:
            print(f"| {label} | {n:,} | {f['rps']:.1f} | {b['rps']:.1f} | {f['rps'] / b['rps']:.2f} | {cpu_split(f)} |")
    return 0


def floor_phase(a, ports: list[int], pg, code: str, config_file: str, phase_dir: str, bare_insert, bare_pid: int,
                headers) -> tuple[dict, dict]:
    """--floor: the create's statements alone, replayed by bench/floor_app.py on the phase's
    database (one gunicorn of it, then stopped), right after a phase of the bare INSERT."""
    metrics = os.path.join(phase_dir, "floor-metrics")
    os.makedirs(metrics)
    floor = start_gunicorn("floor_app:application", ports[1],
                           {"FLOOR_CONFIG": config_file, "PYTHONPATH": code, "PROMETHEUS_MULTIPROC_DIR": metrics},
                           a.workers, os.path.join(phase_dir, "floor.log"))
    try:
        def floor_create(session, rng, k, i):
            return session.post(f"http://127.0.0.1:{ports[1]}/floor", headers=headers(k), json=ask(rng, k, i))
        b = hammer(bare_insert, a.seconds, a.clients, {"workers": bare_pid, "PostgreSQL": pg.pid})
        f = hammer(floor_create, a.seconds, a.clients, {"workers": floor.pid, "PostgreSQL": pg.pid})
    finally:
        stop(floor)
    print(f"  floor (the create's SQL alone): {f['rps']:.1f} req/s, p99 {1000 * f['p99']:.0f} ms, {f['ok']} ok, "
          f"{f['bad']} failed {f['first_bad']}; CPU a request {cpu_split(f)}; bare INSERT just before "
          f"{b['rps']:.1f} req/s, CPU a request {cpu_split(b)}", flush=True)
    return b, f


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
    ap.add_argument("--waiting", help="comma-separated queue lengths: the create phase alone, with that many waiting")
    ap.add_argument("--against", help="with --waiting: also measure this git ref's code (e.g. main), in the same run")
    ap.add_argument("--floor", action="store_true",
                    help="with --waiting: after each create phase, its SQL statements alone (bench/floor_app.py)")
    ap.add_argument("--prepare", help=argparse.SUPPRESS)       # internal: prepare_waiting's subprocess
    ap.add_argument("--prepare-dir", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.prepare:
        return prepare_main(a)
    ports = [a.port, a.port + 1, a.port + 2] if a.port else [free_port(), free_port(), free_port()]
    projects = [f"bench-{i}" for i in range(a.projects)]
    workdir = tempfile.mkdtemp(prefix="gt-bench-api-")
    print(machine())
    print(f"gunicorn {a.workers} sync workers each; {a.clients} client threads in one process; "
          f"{a.seconds:g} s per phase; PostgreSQL (fsync off) on 127.0.0.1; simulated cloud {a.hosts} x 8 A100",
          flush=True)
    if a.waiting:
        return waiting_main(a, ports, projects, workdir)
    with ThrowawayPostgres(ports[0], a.pg_bin) as pg, gunicorns(workdir) as procs:
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
            return identity(projects, k)

        def lease_create(session, rng, k, i):
            return session.post(f"{svc}/v1/leases", headers=headers(k), json=ask(rng, k, i))

        def bare_insert(session, rng, k, i):
            return session.post(f"{bare}/bare", headers=headers(k), json=ask(rng, k, i))

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

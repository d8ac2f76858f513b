"""Real Blazar 18 and gpu-tenancy, the same 200 flavor reservations each, side by side.
Not in CI: it needs the loopback OpenStack running and Blazar beside it.

    bash scripts/loopback/blazar.sh install && bash scripts/loopback/blazar.sh start
    GT_LOOPBACK_DIR=<state dir> python bench/blazar_side_by_side.py [--seed 21] [--only blazar|gpu-tenancy]
    bash scripts/loopback/blazar.sh stop

The cloud: the loopback's three GPU hosts, 2 x 4 A100 and 1 x 2 H100 (10 GPUs).
The workload (seeded), 200 requests for one instance of a GPU flavor each:
  fill    3, one after the other, starting now: a100.x4, a100.x2, h100.x2 (8 of
          the 10 GPUs; 2 A100 stay free)
  ahead   127 starting 2 to 46 h from now, 1 to 6 h long, shapes a100.x1/x2/x4 and
          h100.x1/x2: sent all at once
  beyond  20 bigger than any host (a100.x8, h100.x4), sent with `ahead`
  race    50 x a100.x1 starting now for 1 h, all at once: 2 GPUs are left for them
Then, per system: refused (the create answered an error), queued (accepted, waiting
for GPUs with no start set), scheduled (accepted with a start in the future),
started (running now), and whether any GPU is booked twice: per host and any
moment, the GPUs of the reservations placed there adding up beyond the host's GPUs,
in the system's own view (Blazar: its allocations; gpu-tenancy: its plan), and in
Placement for what runs now.

Blazar is driven through its REST API (as python-blazarclient does) with
`flavor:instance` reservations of flavors made for the bench (the PCI alias the
loopback's Nova knows, vCPUs and RAM as the shapes). Its hosts go into Blazar
(`blazar.sh hosts-add`, i.e. its freepool aggregate) just before the run and out
again right after it (`blazar.sh cleanup`): they are shared. Nova's scheduler
keeps its filters (BlazarFilter is not added to the running cloud), so nothing
boots: Blazar's side is Blazar's own accounting, which is what decides what it
accepts. gpu-tenancy runs in this process on its simulated cloud driver set up
as the loopback's hosts (booting on the shared GPUs would take them from
everyone else), auth noauth2, SQLite, the engine ticking every second.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import itertools
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "service"))

import requests  # noqa: E402

# the loopback's GPU hosts (scripts/loopback/lib.sh LB_COMPUTES): name -> (model, GPUs)
HOSTS = {"gpu-a100-1": ("A100", 4), "gpu-a100-2": ("A100", 4), "gpu-h100-1": ("H100", 2)}
SHAPES = {"a100.x1": ("A100", 1), "a100.x2": ("A100", 2), "a100.x4": ("A100", 4), "a100.x8": ("A100", 8),
          "h100.x1": ("H100", 1), "h100.x2": ("H100", 2), "h100.x4": ("H100", 4)}
HOUR = 3600
FLAVOR_PREFIX = "bench-blazar-"


@dataclass(frozen=True)
class Ask:
    phase: str
    shape: str
    start: int   # seconds from now (0: now)
    hours: int


def workload(seed: int) -> list[Ask]:
    rng = random.Random(seed)
    fill = [Ask("fill", s, 0, 1) for s in ("a100.x4", "a100.x2", "h100.x2")]
    ahead = [Ask("ahead", rng.choice(("a100.x1", "a100.x2", "a100.x4", "h100.x1", "h100.x2")),
                 rng.randint(2, 46) * HOUR, rng.randint(1, 6)) for _ in range(127)]
    beyond = [Ask("beyond", rng.choice(("a100.x8", "h100.x4")), rng.randint(0, 46) * HOUR, rng.randint(1, 6))
              for _ in range(20)]
    batch = ahead + beyond
    rng.shuffle(batch)
    race = [Ask("race", "a100.x1", 0, 1) for _ in range(50)]
    return fill + batch + race


def overbooked(bookings: list[tuple[str, int, int, int]]) -> list[str]:
    """bookings: (host, start, end, gpus). Hosts and moments where they add up beyond the host's GPUs."""
    bad = []
    for host, (_, cap) in HOSTS.items():
        mine = [(s, e, g) for h, s, e, g in bookings if h == host]
        for t in sorted({s for s, _, _ in mine}):
            used = sum(g for s, e, g in mine if s <= t < e)
            if used > cap:
                bad.append(f"{host} {used}/{cap} GPUs at {dt.datetime.fromtimestamp(t, dt.UTC):%m-%d %H:%M}")
    return bad


def send_all(asks, send, workers):
    with cf.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(send, asks))


def run(asks: list[Ask], send) -> list:
    """fill one by one, then ahead + beyond together, then the race together."""
    out = [send(a) for a in asks if a.phase == "fill"]
    out += send_all([a for a in asks if a.phase in ("ahead", "beyond")], send, 32)
    out += send_all([a for a in asks if a.phase == "race"], send, 50)
    return out


# ---- gpu-tenancy -------------------------------------------------------------------------

def gpu_tenancy(asks: list[Ask]) -> dict:
    from werkzeug.serving import make_server

    from gpu_tenancy.app import create_app
    from gpu_tenancy.cloud.simulated import SimulatedCloud
    from gpu_tenancy.config import Config
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import session_scope, utcnow_naive
    from gpu_tenancy.demo.seed import seed
    from gpu_tenancy.clock import SystemClock

    tmp = tempfile.mkdtemp(prefix="bench-blazar-")
    db = f"sqlite:///{tmp}/gt.db"
    config = Config.load(database_url=db, auth_strategy="noauth2", run_engine=True, engine_tick_seconds=1)
    migrate.upgrade(db)
    clock = SystemClock()
    cloud = SimulatedCloud({
        "boot_seconds": 3, "delete_seconds": 1,
        "gpu_models": {"A100": {"resource_class": "CUSTOM_PGPU_A100", "pci_alias": "a100"},
                       "H100": {"resource_class": "CUSTOM_PGPU_H100", "pci_alias": "h100"}},
        "hosts": [{"prefix": "gpu-a100-", "count": 2, "gpu_model": "A100", "gpus": 4, "aggregate": "a100"},
                  {"prefix": "gpu-h100-", "count": 1, "gpu_model": "H100", "gpus": 2, "aggregate": "h100"}],
        "images": [{"id": "0b7c3a4e-1d2f-4c5a-9e8b-22c0da000001", "name": "ubuntu-22.04", "status": "active"}],
        "networks": [{"name": "public", "external": True, "cidr": "172.24.4.0/24"}],
        "auto_allocate": True,
    }, clock)
    app = create_app(config, clock=clock, cloud=cloud)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, runtime.clock.now(), runtime.cloud.images())
        # Blazar has no quota: each bench project may hold every GPU of the cloud, for up to 2 days
        for model in ("A100", "H100"):
            total = sum(n for h, (mo, n) in HOSTS.items() if mo == model)
            for p in range(4):
                session.add(m.Quota(project_id=f"bench-{p}", gpu_model=model, gpus=total, borrow_gpus=0,
                                    max_duration=2 * 86400, weight=1.0, updated_at=utcnow_naive(clock.now())))
    runtime.engine.lifecycle.refresh_hosts()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/v1"
    admin = {"X-Project-Id": "bench-0", "X-User-Id": "bench", "X-Roles": "admin"}
    now = int(time.time())
    serial = itertools.count()   # names are unique per project

    def send(a: Ask):
        n = next(serial)
        # one user per 10 requests: a user may have only so many leases waiting (gpu-tenancy's limit)
        # and a project only so many: four projects of 50, each with a quota of the whole cloud
        headers = {"X-Project-Id": f"bench-{n % 4}", "X-User-Id": f"bench-{n // 10}", "X-Roles": "member"}
        body = {"name": f"{a.phase}-{a.shape}-{n}", "shape": a.shape, "duration": f"PT{a.hours}H",
                "image": "ubuntu-22.04"}
        if a.start:
            body["start"] = dt.datetime.fromtimestamp(now + a.start, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        r = requests.post(f"{base}/leases", json=body, headers=headers, timeout=120)
        return (a, r.status_code, r.json() if r.content else {})

    try:
        t0 = time.monotonic()
        answers = run(asks, send)
        took = time.monotonic() - t0
        time.sleep(15)   # the engine plans, boots (3 s simulated) and settles
        leases = {}
        url = f"{base}/leases?limit=500&all_projects=1"
        while url:
            page = requests.get(url, headers=admin, timeout=60).json()
            leases.update({lz["id"]: lz for lz in page["leases"]})
            url = next((lk["href"] for lk in page.get("leases_links", []) if lk["rel"] == "next"), None)
        return summarize("gpu-tenancy", answers, leases, took, gt_bookings(leases), gt_placement(cloud))
    finally:
        server.shutdown()
        runtime.engine.stop()


def gt_bookings(leases: dict) -> list[tuple[str, int, int, int]]:
    """The plan's allocations of every lease holding or promised GPUs: (host, start, end, GPUs)."""
    return [(al["host"], ts(al["start"]), ts(al["end"]), al["gpus"])
            for lz in leases.values() if lz["status"] in ("scheduled", "provisioning", "active")
            for al in lz.get("allocations") or [] if al.get("host")]


def gt_placement(cloud) -> dict[str, int]:
    """GPUs the simulated cloud's Placement has allocated per host now."""
    used = {h: 0 for h in HOSTS}
    for host, gpus in cloud.allocations().values():
        used[host] += gpus
    return used


def ts(text: str) -> int:
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


# ---- Blazar ---------------------------------------------------------------------------

def blazar(asks: list[Ask]) -> dict:
    import openstack

    state = os.environ.get("GT_LOOPBACK_DIR") or os.path.join(REPO, ".loopback")
    os.environ.setdefault("OS_CLIENT_CONFIG_FILE", os.path.join(state, "clouds.yaml"))
    script = os.path.join(REPO, "scripts", "loopback", "blazar.sh")
    env = dict(os.environ, GT_LOOPBACK_DIR=state)
    conn = openstack.connect(cloud="gt-admin")
    sess = conn.session
    endpoint = sess.get_endpoint(service_type="reservation", interface="public")
    flavors = {}
    for name, (model, gpus) in SHAPES.items():
        old = conn.compute.find_flavor(FLAVOR_PREFIX + name, ignore_missing=True)
        if old is not None:
            conn.compute.delete_flavor(old)
        f = conn.compute.create_flavor(name=FLAVOR_PREFIX + name, vcpus=gpus, ram=512 * gpus, disk=1,
                                       is_public=False)
        conn.compute.create_flavor_extra_specs(f, {"pci_passthrough:alias": f"{model.lower()}:{gpus}",
                                                   "trait:CUSTOM_GPU_TENANCY": "required"})
        flavors[name] = f.id
    now = int(time.time()) + 60   # Blazar wants whole minutes; "now" leases use the word
    serial = itertools.count()

    def fmt(t):
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")

    def send(a: Ask):
        start = now + a.start
        body = {"name": f"bench-{a.phase}-{a.shape}-{next(serial)}",
                "start_date": "now" if a.start == 0 else fmt(start), "end_date": fmt(start + a.hours * HOUR),
                "reservations": [{"resource_type": "flavor:instance", "flavor_id": flavors[a.shape],
                                  "amount": 1, "affinity": None}],
                "events": []}
        r = sess.post(f"{endpoint}/leases", json=body, raise_exc=False, timeout=300)
        try:
            payload = r.json()
        except ValueError:
            payload = {"text": r.text}
        return (a, r.status_code, payload.get("lease", payload))

    try:
        subprocess.run(["bash", script, "hosts-add"], check=True, env=env)
        t0 = time.monotonic()
        answers = run(asks, send)
        took = time.monotonic() - t0
        # the manager starts "now" leases from its event loop
        deadline = time.time() + 120
        while True:
            leases = {lz["id"]: lz for lz in sess.get(f"{endpoint}/leases").json()["leases"]}
            waiting = [lz for lz in leases.values() if lz["status"] in ("PENDING", "STARTING")
                       and ts(lz["start_date"]) <= time.time()]
            if not waiting or time.time() > deadline:
                break
            time.sleep(3)
        hosts = {h["id"]: h["hypervisor_hostname"] for h in sess.get(f"{endpoint}/os-hosts").json()["hosts"]}
        allocs = sess.get(f"{endpoint}/os-hosts/allocations").json()["allocations"]
        res_shape = reservation_shapes(leases)
        bookings = [(hosts[al["resource_id"]], ts(r["start_date"]), ts(r["end_date"]), SHAPES[res_shape[r["id"]]][1])
                    for al in allocs for r in al["reservations"] if r["id"] in res_shape]
        placement = blazar_placement(conn, leases, res_shape)
        return summarize("Blazar 18", answers, leases, took, bookings, placement)
    finally:
        subprocess.run(["bash", script, "cleanup"], env=env)
        for name in SHAPES:
            f = conn.compute.find_flavor(FLAVOR_PREFIX + name, ignore_missing=True)
            if f is not None:
                conn.compute.delete_flavor(f)


def reservation_shapes(leases: dict) -> dict[str, str]:
    """reservation id -> the bench shape asked for. A flavor reservation's flavor_id is the flavor
    Blazar made for it; the one asked for is in resource_properties (a JSON string)."""
    out = {}
    for lz in leases.values():
        for rsv in lz["reservations"]:
            props = rsv.get("resource_properties") or "{}"
            name = (json.loads(props) if isinstance(props, str) else props).get("name", "")
            if name.startswith(FLAVOR_PREFIX):
                out[rsv["id"]] = name[len(FLAVOR_PREFIX):]
    return out


def blazar_placement(conn, leases, res_shape) -> dict[str, int]:
    """GPUs per host that Blazar has set aside in Placement for its running leases: each
    started flavor reservation is an inventory CUSTOM_RESERVATION_<id> of `amount` instances
    on the host's blazar_<host> provider."""
    used = {h: 0 for h in HOSTS}
    for rp in conn.placement.resource_providers():
        if not rp.name.startswith("blazar_"):
            continue
        host = rp.name[len("blazar_"):]
        for inv in conn.placement.resource_provider_inventories(rp):
            rid = inv.resource_class[len("CUSTOM_RESERVATION_"):].lower().replace("_", "-")
            if rid in res_shape and host in used:
                used[host] += inv.total * SHAPES[res_shape[rid]][1]
    return used


# ---- the table ------------------------------------------------------------------------

def summarize(system, answers, leases, took, bookings, placement) -> dict:
    refused = [(a, code, body) for a, code, body in answers if code >= 300]
    status = {}
    for lz in leases.values():
        status[lz["status"].lower()] = status.get(lz["status"].lower(), 0) + 1
    reasons = {}
    for _, code, body in refused:
        text = str(body.get("error_message") or body.get("message") or (body.get("error") or {}).get("message")
                   or (body.get("errors") or [{}])[0].get("detail") or body)[:110]
        reasons[f"{code} {text}"] = reasons.get(f"{code} {text}", 0) + 1
    race_ok = sum(1 for a, code, _ in answers if a.phase == "race" and code < 300)
    race_started = sum(1 for lz in leases.values() if "race-" in lz["name"]
                       and lz["status"].lower() in ("active", "provisioning"))
    return {"system": system, "sent": len(answers), "refused": len(refused), "status": status,
            "race_accepted": race_ok, "race_started": race_started, "seconds": took, "overbooked": overbooked(bookings),
            "placement": placement,
            "placement_over": [h for h, n in placement.items() if n > HOSTS[h][1]], "reasons": reasons}


def show(r: dict) -> None:
    s = r["status"]
    print(f"\n== {r['system']}: {r['sent']} sent in {r['seconds']:.1f} s")
    print(f"  refused {r['refused']}  queued {s.get('queued', 0)}  "
          f"scheduled/pending {s.get('scheduled', 0) + s.get('pending', 0)}  "
          f"started {s.get('active', 0) + s.get('provisioning', 0)}  failed {s.get('failed', 0) + s.get('error', 0)}")
    print(f"  states: {dict(sorted(s.items()))}")
    print(f"  race for the 2 free A100: {r['race_accepted']} of 50 accepted, {r['race_started']} started")
    print(f"  GPUs booked twice (own view): {'NO' if not r['overbooked'] else 'YES ' + str(len(r['overbooked']))}")
    for line in r["overbooked"][:8]:
        print(f"    {line}")
    print(f"  Placement now, GPUs per host: {r['placement']}"
          f"{'  OVER: ' + ', '.join(r['placement_over']) if r['placement_over'] else ''}")
    for reason, n in sorted(r["reasons"].items(), key=lambda kv: -kv[1])[:6]:
        print(f"  refused x{n}: {reason}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--only", choices=("blazar", "gpu-tenancy"))
    args = p.parse_args()
    asks = workload(args.seed)
    print(f"workload: {len(asks)} requests (seed {args.seed}): "
          + ", ".join(f"{ph} {sum(a.phase == ph for a in asks)}" for ph in ("fill", "ahead", "beyond", "race")))
    results = []
    if args.only != "blazar":
        results.append(gpu_tenancy(asks))
        show(results[-1])
    if args.only != "gpu-tenancy":
        results.append(blazar(asks))
        show(results[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real Blazar 18 and gpu-tenancy side by side on the loopback OpenStack: the same 200 flavor reservations to each.
Both boot on it what they start. Not in CI: it needs that cloud and takes 15-20 min.

    GT_LOOPBACK_DIR=<state dir> python bench/blazar_side_by_side.py --setup [--seed 21] [--stop-by 00:05]

--setup starts the loopback cloud if none answers (scripts/loopback/install.sh and
start.sh, stopped again at the end), installs and starts Blazar beside it
(scripts/loopback/blazar.sh install, start) and stops it at the end (blazar.sh stop:
its pids, then a sweep of what it made in Nova and Placement, its database dropped).
Without --setup Blazar must be running (blazar.sh start) and the bench ends with
`blazar.sh cleanup` (its leases deleted through it: about 10 min for 200).
Either way the bench adds BlazarFilter to nova-scheduler (`blazar.sh nova-filter on`)
after gpu-tenancy's side and takes it out again at the end, and checks that servers,
flavors, aggregates, Placement providers and classes are as it found them.
--stop-by HH:MM (UTC): give up and undo everything if the run is not done by then.

The cloud: the loopback's three GPU hosts, 2 x 4 A100 and 1 x 2 H100 (10 GPUs).
The workload (seeded), 200 requests for one instance of a GPU flavor each:
  fill    3, one after the other, starting now: a100.x4, a100.x2, h100.x2 (8 of
          the 10 GPUs; 2 A100 stay free)
  ahead   127 starting 2 to 46 h from now, 1 to 6 h long, shapes a100.x1/x2/x4 and
          h100.x1/x2: sent all at once
  beyond  20 bigger than any host (a100.x8, h100.x4), sent with `ahead`
  race    50 x a100.x1 starting now for 1 h, all at once: 2 GPUs are left for them
Each system's leases that start now get their instance booted (gpu-tenancy's engine
boots them; for Blazar the bench boots one server per started reservation with the
flavor Blazar made for it, the fill one by one, the race all at once), and then per
system: refused (the create answered an error), queued (accepted, waiting for GPUs
with no start set), scheduled (accepted with a start in the future), started (the
lease is running), instances running and failed, and whether any GPU is booked
twice: per host and any moment, the GPUs of the reservations placed there adding up
beyond the host's GPUs, in the system's own view (Blazar: its allocations;
gpu-tenancy: its plan), and in Placement (any GPU provider's usage beyond its
inventory, and the GPUs in use per host).

gpu-tenancy runs in this process on its openstack driver, as tests/integration
sets it up (the gpu-tenancy service user, private per-lease flavors requiring
trait CUSTOM_GPU_TENANCY, no network), auth noauth2 with the tenant-a and tenant-b
projects, SQLite, the engine ticking every second, no cap on waiting leases
(Blazar has none). Blazar is driven through its REST API (as python-blazarclient
does) as the admin, with `flavor:instance` reservations of flavors made for the
bench (the PCI alias the loopback's Nova knows, vCPUs and RAM as the shapes).
The two share the cloud's 10 GPUs one after the other: the GPU hosts go into
Blazar (its freepool aggregate) first, since Blazar refuses a host with servers on
it; gpu-tenancy's side runs while Blazar takes in its 147 leases ahead (its
manager needs 10 min for the 200: it makes a flavor, an aggregate and a Placement
class per reservation), with its servers deleted again before BlazarFilter goes
into nova-scheduler (which then refuses every boot on a freepool host but a
reservation's) and before Blazar's race and boots.
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
import urllib.request
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
PREFIX = "bench-blazar-"                 # the bench's flavors and Blazar's servers
ISOLATION = {"trait:CUSTOM_GPU_TENANCY": "required"}   # the GPU hosts' isolated aggregates want it
STATE = os.environ.get("GT_LOOPBACK_DIR") or os.path.join(REPO, ".loopback")
CLOUDS = os.path.join(STATE, "clouds.yaml")
LOOPBACK = os.path.join(REPO, "scripts", "loopback")
BLAZAR_URL = "http://127.0.0.1:1234/v1"   # blazar.sh BZ_URL; the catalog's `reservation` may be gpu-tenancy's
ENV = dict(os.environ, GT_LOOPBACK_DIR=STATE, OS_CLIENT_CONFIG_FILE=CLOUDS)
os.environ["OS_CLIENT_CONFIG_FILE"] = CLOUDS
WAITING = ("requested", "queued", "scheduled", "provisioning", "active", "ending")


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


class Deadline:
    def __init__(self, stop_by: str | None):
        self.at = None
        if stop_by:
            now = dt.datetime.now(dt.UTC)
            hh, mm = (int(x) for x in stop_by.split(":"))
            at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
            self.at = (at if at > now else at + dt.timedelta(days=1)).timestamp()

    def check(self, what: str) -> None:
        if self.at is not None and time.time() > self.at:
            raise TimeoutError(f"--stop-by reached while {what}: undoing everything")


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


def run(asks: list[Ask], send, meanwhile=None) -> list:
    """fill one by one, then ahead + beyond together (meanwhile() runs while they are sent),
    then the race together."""
    out = [send(a) for a in asks if a.phase == "fill"]
    pool = cf.ThreadPoolExecutor(32)
    try:
        futures = [pool.submit(send, a) for a in asks if a.phase in ("ahead", "beyond")]
        if meanwhile is not None:
            meanwhile()
        out += [f.result() for f in futures]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)   # the undoing does not wait for the sends under way
        raise
    pool.shutdown()
    with cf.ThreadPoolExecutor(50) as pool:
        out += list(pool.map(send, [a for a in asks if a.phase == "race"]))
    return out


T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[bench {time.monotonic() - T0:5.0f}s] {text}", flush=True)


def wait_until(what: str, check, deadline: Deadline, timeout: float, every: float = 2.0):
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > end:
            return value
        deadline.check(what)
        time.sleep(every)


# ---- the shared cloud --------------------------------------------------------------------

def placement_gpus(conn) -> tuple[dict[str, int], list[str]]:
    """GPUs in use per host in Placement (its PCI GPU providers' usages), and any GPU provider
    whose usage is beyond its inventory: a GPU booked twice."""
    providers = list(conn.placement.resource_providers())
    names = {rp.id: rp.name for rp in providers}
    used = {h: 0 for h in HOSTS}
    over = []
    for rp in providers:
        if not rp.parent_provider_id or names.get(rp.root_provider_id) not in used:
            continue
        usages = conn.placement.fetch_resource_provider_usages(rp).usages or {}
        gpus = {rc: n for rc, n in usages.items() if rc.startswith("CUSTOM_PGPU_")}
        if not gpus:
            continue
        used[names[rp.root_provider_id]] += sum(gpus.values())
        for inv in conn.placement.resource_provider_inventories(rp):
            if inv.resource_class in gpus and gpus[inv.resource_class] > inv.total:
                over.append(f"{rp.name}: {gpus[inv.resource_class]} of {inv.total}")
    return used, over


def snapshot(conn) -> dict[str, set]:
    """What the bench or Blazar could leave behind in the shared cloud."""
    aggs = {f"{a.name}: {sorted(a.hosts or [])} {dict(sorted((a.metadata or {}).items()))}"
            for a in conn.compute.aggregates()}
    return {"servers": {f"{s.name} ({s.id})" for s in conn.compute.servers(all_projects=True)},
            "flavors": {f.name for f in conn.compute.flavors(is_public=None)},
            "aggregates": aggs,
            "Placement providers": {rp.name for rp in conn.placement.resource_providers()},
            "resource classes": {rc.name for rc in conn.placement.resource_classes() if rc.name.startswith("CUSTOM_")},
            "reservation endpoints": {s.name for s in conn.identity.services() if s.type == "reservation"}}


def compare(before: dict[str, set], after: dict[str, set]) -> bool:
    same = True
    for what in before:
        gone, new = before[what] - after[what], after[what] - before[what]
        if gone or new:
            same = False
            print(f"  {what}: left behind {sorted(new)[:6]} ({len(new)}), gone {sorted(gone)[:6]} ({len(gone)})")
    print("the cloud is as the bench found it" if same else "the cloud is NOT as the bench found it")
    return same


def blazar_sh(*args: str) -> None:
    subprocess.run(["bash", os.path.join(LOOPBACK, "blazar.sh"), *args], check=True, env=ENV)


# ---- gpu-tenancy -------------------------------------------------------------------------

def gpu_tenancy(asks: list[Ask], admin, deadline: Deadline) -> dict:
    from werkzeug.serving import make_server

    from gpu_tenancy.app import create_app
    from gpu_tenancy.clock import SystemClock
    from gpu_tenancy.cloud.driver import LEASE_TAG
    from gpu_tenancy.cloud.openstack import OpenStackCloud
    from gpu_tenancy.cloud.openstack.connection import connect
    from gpu_tenancy.config import Config
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import session_scope, utcnow_naive

    tmp = tempfile.mkdtemp(prefix="bench-blazar-")
    db = f"sqlite:///{tmp}/gt.db"
    config = Config.load(database_url=db, auth_strategy="noauth2", run_engine=True, engine_tick_seconds=1,
                         max_waiting_leases_per_project=10**4, max_waiting_leases_per_user=10**4)
    migrate.upgrade(db)
    clock = SystemClock()
    cloud = OpenStackCloud(connect("gt-service", CLOUDS), resource_classes={}, network="none",
                           flavor_extra_specs=ISOLATION)
    projects = [admin.identity.find_project(name, ignore_missing=False).id for name in ("tenant-a", "tenant-b")]
    image_id = admin.image.find_image("ubuntu-22.04", ignore_missing=False).id
    app = create_app(config, clock=clock, cloud=cloud)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        now = utcnow_naive(clock.now())
        for name, (model, gpus) in SHAPES.items():
            session.add(m.Shape(name=name, gpu_model=model, gpus=gpus, vcpus=gpus, ram_mb=512 * gpus, disk_gb=1,
                                pci_alias=model.lower(), created_at=now))
        session.add(m.Image(name="ubuntu-22.04", cloud_ref=image_id, created_at=now))
        # Blazar has no quota: each project may hold every GPU of the cloud, for up to 2 days
        for model in ("A100", "H100"):
            total = sum(n for mo, n in HOSTS.values() if mo == model)
            for project in projects:
                session.add(m.Quota(project_id=project, gpu_model=model, gpus=total, borrow_gpus=0,
                                    max_duration=2 * 86400, weight=1.0, updated_at=now))
    runtime.engine.lifecycle.refresh_hosts()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/v1"
    start = int(time.time())
    serial = itertools.count()   # names are unique per project

    def admin_of(project: str) -> dict:
        return {"X-Project-Id": project, "X-User-Id": "bench-admin", "X-Roles": "admin"}

    def send(a: Ask):
        n = next(serial)
        headers = {"X-Project-Id": projects[n % 2], "X-User-Id": f"bench-{n // 10}", "X-Roles": "member"}
        body = {"name": f"{a.phase}-{a.shape}-{n}", "shape": a.shape, "duration": f"PT{a.hours}H",
                "image": "ubuntu-22.04"}
        if a.start:
            body["start"] = dt.datetime.fromtimestamp(start + a.start, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        r = requests.post(f"{base}/leases", json=body, headers=headers, timeout=120)
        return (a, r.status_code, r.json() if r.content else {})

    def leases() -> dict:
        out = {}
        url: str | None = f"{base}/leases?limit=500&all_projects=1"
        while url:
            page = requests.get(url, headers=admin_of(projects[0]), timeout=60).json()
            out.update({lz["id"]: lz for lz in page["leases"]})
            url = next((lk["href"] for lk in page.get("leases_links", []) if lk["rel"] == "next"), None)
        return out

    def servers() -> list:
        return [s for s in admin.compute.servers(details=True, all_projects=True) if LEASE_TAG in (s.metadata or {})]

    try:
        t0 = time.monotonic()
        answers = run(asks, send)
        took = time.monotonic() - t0
        say(f"gpu-tenancy answered the {len(answers)} in {took:.0f} s")
        # the engine plans and boots what starts now; settled when nothing provisions and the
        # states have not moved for three looks in a row
        seen: list = []

        def settled():
            now = leases()
            counts = sorted(_counts(now).items())
            seen.append(counts)
            return (not any(lz["status"] == "provisioning" for lz in now.values())
                    and len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]) and now
        final = wait_until("gpu-tenancy's leases start", settled, deadline, timeout=300, every=3) or leases()
        say("gpu-tenancy has settled")
        running = servers()
        placement, over = placement_gpus(admin)
        result = summarize("gpu-tenancy", answers, final, took, gt_bookings(final), placement, over,
                           instances(running))
    finally:
        # every lease cancelled or ended, its servers deleted by the engine, and its flavors and classes
        for lz in leases().values():
            if lz["status"] in WAITING:
                requests.delete(f"{base}/leases/{lz['id']}", headers=admin_of(lz["project_id"]), timeout=120)
        wait_until("gpu-tenancy's leases end", lambda: not servers() and not any(
            lz["status"] in WAITING for lz in leases().values()), Deadline(None), timeout=300, every=3)
        server.shutdown()
        runtime.engine.stop()
        say("gpu-tenancy's leases are over, its servers gone")
    return result


def _counts(leases: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for lz in leases.values():
        out[lz["status"].lower()] = out.get(lz["status"].lower(), 0) + 1
    return out


def gt_bookings(leases: dict) -> list[tuple[str, int, int, int]]:
    """The plan's allocations of every lease holding or promised GPUs: (host, start, end, GPUs)."""
    return [(al["host"], ts(al["start"]), ts(al["end"]), al["gpus"])
            for lz in leases.values() if lz["status"] in ("scheduled", "provisioning", "active")
            for al in lz.get("allocations") or [] if al.get("host")]


def instances(servers: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in servers:
        out[s.status] = out.get(s.status, 0) + 1
    return out


def ts(text: str) -> int:
    """A time of either API as seconds; Blazar's have no zone and are UTC."""
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp())


# ---- Blazar ---------------------------------------------------------------------------

def blazar(asks: list[Ask], admin, deadline: Deadline, meanwhile) -> dict:
    import openstack
    sess = admin.session
    url = BLAZAR_URL
    image_id = admin.image.find_image("ubuntu-22.04", ignore_missing=False).id
    flavors = {}
    for name, (model, gpus) in SHAPES.items():
        old = admin.compute.find_flavor(PREFIX + name, ignore_missing=True)
        if old is not None:
            admin.compute.delete_flavor(old)
        f = admin.compute.create_flavor(name=PREFIX + name, vcpus=gpus, ram=512 * gpus, disk=1, is_public=False)
        admin.compute.create_flavor_extra_specs(f, {"pci_passthrough:alias": f"{model.lower()}:{gpus}", **ISOLATION})
        flavors[name] = f.id
    now = int(time.time()) + 60   # Blazar wants whole minutes; "now" leases use the word
    serial = itertools.count()
    answered = itertools.count(1)

    def fmt(t):
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")

    def send(a: Ask):
        deadline.check("sending to Blazar")
        start = now + a.start
        body = {"name": f"{PREFIX}{a.phase}-{a.shape}-{next(serial)}",
                "start_date": "now" if a.start == 0 else fmt(start), "end_date": fmt(start + a.hours * HOUR),
                "reservations": [{"resource_type": "flavor:instance", "flavor_id": flavors[a.shape],
                                  "amount": 1, "affinity": None}],
                "events": []}
        r = sess.post(f"{url}/leases", json=body, raise_exc=False, timeout=600)
        try:
            payload = r.json()
        except ValueError:
            payload = {"text": r.text}
        if (n := next(answered)) % 25 == 0:
            say(f"Blazar has answered {n} of {len(asks)}")
        return (a, r.status_code, payload.get("lease", payload))

    def leases() -> dict:
        return {lz["id"]: lz for lz in sess.get(f"{url}/leases").json()["leases"]}

    def servers() -> list:
        return [s for s in admin.compute.servers(details=True, all_projects=True) if s.name.startswith(PREFIX)]

    boots = cf.ThreadPoolExecutor(16)
    # Blazar's leases and so their instances are the admin project's, whose Nova quota (10
    # instances, 20 cores) would refuse most of the 53 boots before any GPU is looked at:
    # lifted for the run (gpu-tenancy's tenants have room for its 5), put back after
    project = admin.current_project_id
    quota = admin.compute.get_quota_set(project)
    kept = {k: getattr(quota, k) for k in ("instances", "cores", "ram")}
    admin.compute.update_quota_set(project, instances=-1, cores=-1, ram=-1)
    try:
        # the hosts into Blazar (its freepool), through its API as `openstack reservation host create`
        if admin.compute.find_aggregate("freepool") is None:
            admin.compute.create_aggregate(name="freepool")
        known = {h["hypervisor_hostname"] for h in sess.get(f"{url}/os-hosts").json()["hosts"]}
        for host in HOSTS:
            if host not in known:
                sess.post(f"{url}/os-hosts", json={"name": host})
        # one instance per started reservation, with the flavor Blazar made for it (its id is the
        # reservation's), as its user would: the fill's one by one once BlazarFilter is in, then
        # each of the race's as soon as Blazar starts its lease
        booted: set[str] = set()
        refused_boots: list[str] = []

        def boot(lz, wait: bool) -> None:
            deadline.check("booting Blazar's instances")
            try:
                s = admin.compute.create_server(name=lz["name"], flavor_id=lz["reservations"][0]["id"],
                                                image_id=image_id, networks="none")
            except openstack.exceptions.SDKException as exc:   # Nova's API said no: counted, not fatal
                refused_boots.append(str(exc)[:200])
                return
            if wait:
                wait_until("an instance", lambda: admin.compute.get_server(s.id).status in ("ACTIVE", "ERROR"),
                           deadline, timeout=300)

        def boot_started(wait: bool, only: str = "") -> list | None:
            """Boots the leases of now that Blazar has started since the last call; returns the
            leases of now, or None while Blazar has some still to start."""
            mine = [lz for lz in leases().values() if ts(lz["start_date"]) <= time.time() and only in lz["name"]]
            for lz in sorted(mine, key=lambda lz: int(lz["name"].rsplit("-", 1)[1])):   # in the order sent
                if lz["status"] == "ACTIVE" and lz["id"] not in booted:
                    booted.add(lz["id"])
                    if wait:
                        boot(lz, True)
                    else:
                        boots.submit(boot, lz, False)
            return None if any(lz["status"] in ("PENDING", "STARTING") for lz in mine) else mine

        def then_fill():
            meanwhile()
            wait_until("Blazar starts the fill", lambda: boot_started(True, "-fill-") is not None, deadline, 600, 5)
            say(f"the fill's {len(booted)} instances are asked for")

        say("the GPU hosts are in Blazar; sending")
        t0 = time.monotonic()
        answers = run(asks, send, then_fill)
        took = time.monotonic() - t0
        say(f"Blazar answered the {len(answers)} in {took:.0f} s")
        wait_until("Blazar starts its leases", lambda: boot_started(False) is not None, deadline, 600, 5)
        boots.shutdown(wait=True)
        say(f"Blazar has started {len(booted)} leases of now; an instance asked for each")
        for text in refused_boots[:3]:
            say(f"Nova refused a boot: {text}")
        wait_until("Blazar's instances boot or fail", lambda: all(
            s.status in ("ACTIVE", "ERROR") for s in servers()), deadline, timeout=600, every=3)
        say("Blazar's instances are booted or failed")
        final = leases()
        hosts = {h["id"]: h["hypervisor_hostname"] for h in sess.get(f"{url}/os-hosts").json()["hosts"]}
        allocs = sess.get(f"{url}/os-hosts/allocations").json()["allocations"]
        res_shape = reservation_shapes(final)
        bookings = [(hosts[al["resource_id"]], ts(r["start_date"]), ts(r["end_date"]), SHAPES[res_shape[r["id"]]][1])
                    for al in allocs for r in al["reservations"] if r["id"] in res_shape]
        placement, over = placement_gpus(admin)
        running = servers()
        result = summarize("Blazar 18", answers, final, took, bookings, placement, over,
                           {**instances(running), **({"refused by Nova": len(refused_boots)} if refused_boots else {})})
        result["instance_hosts"] = sorted({s.compute_host for s in running if s.status == "ACTIVE"})
    finally:
        boots.shutdown(cancel_futures=True)
        for s in servers():
            admin.compute.delete_server(s, ignore_missing=True)
        wait_until("Blazar's servers go", lambda: not servers(), Deadline(None), timeout=300)
        admin.compute.update_quota_set(project, **kept)
        for name in SHAPES:
            f = admin.compute.find_flavor(PREFIX + name, ignore_missing=True)
            if f is not None:
                admin.compute.delete_flavor(f)
    return result


def reservation_shapes(leases: dict) -> dict[str, str]:
    """reservation id -> the bench shape asked for. A flavor reservation's flavor_id is the flavor
    Blazar made for it; the one asked for is in resource_properties (a JSON string)."""
    out = {}
    for lz in leases.values():
        for rsv in lz["reservations"]:
            props = rsv.get("resource_properties") or "{}"
            name = (json.loads(props) if isinstance(props, str) else props).get("name", "")
            if name.startswith(PREFIX):
                out[rsv["id"]] = name[len(PREFIX):]
    return out


# ---- the table ------------------------------------------------------------------------

def summarize(system, answers, leases, took, bookings, placement, placement_over, servers) -> dict:
    refused = [(a, code, body) for a, code, body in answers if code >= 300]
    reasons: dict[str, int] = {}
    for _, code, body in refused:
        text = str(body.get("error_message") or body.get("message") or (body.get("error") or {}).get("message")
                   or (body.get("errors") or [{}])[0].get("detail") or body)[:110]
        reasons[f"{code} {text}"] = reasons.get(f"{code} {text}", 0) + 1
    race_ok = sum(1 for a, code, _ in answers if a.phase == "race" and code < 300)
    race_started = sum(1 for lz in leases.values() if "race-" in lz["name"]
                       and lz["status"].lower() in ("active", "provisioning"))
    return {"system": system, "sent": len(answers), "refused": len(refused), "status": _counts(leases),
            "race_accepted": race_ok, "race_started": race_started, "seconds": took,
            "overbooked": overbooked(bookings), "placement": placement, "placement_over": placement_over,
            "placement_hosts_over": [h for h, n in placement.items() if n > HOSTS[h][1]],
            "servers": servers, "reasons": reasons}


def show(r: dict) -> None:
    s = r["status"]
    print(f"\n== {r['system']}: {r['sent']} sent in {r['seconds']:.1f} s")
    print(f"  refused {r['refused']}  queued {s.get('queued', 0)}  "
          f"scheduled/pending {s.get('scheduled', 0) + s.get('pending', 0)}  "
          f"started {s.get('active', 0) + s.get('provisioning', 0)}  failed {s.get('failed', 0) + s.get('error', 0)}")
    print(f"  lease states: {dict(sorted(s.items()))}")
    print(f"  instances: {r['servers']}{'  on ' + ', '.join(r['instance_hosts']) if r.get('instance_hosts') else ''}")
    print(f"  race for the 2 free A100: {r['race_accepted']} of 50 accepted, {r['race_started']} leases started")
    print(f"  GPUs booked twice (own view): {'no' if not r['overbooked'] else 'YES at ' + str(len(r['overbooked']))}"
          " host-moments")
    for line in r["overbooked"][:6]:
        print(f"    {line}")
    print(f"  Placement, GPUs in use per host: {r['placement']}; GPU providers over their inventory: "
          f"{r['placement_over'] or 'none'}")
    for reason, n in sorted(r["reasons"].items(), key=lambda kv: -kv[1])[:6]:
        print(f"  refused x{n}: {reason}")


def table(results: list[dict]) -> None:
    def row(label, fn):
        print(f"| {label} | " + " | ".join(str(fn(r)) for r in results) + " |")
    print("\n| | " + " | ".join(r["system"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    row("refused", lambda r: r["refused"])
    row("queued", lambda r: r["status"].get("queued", 0))
    row("scheduled (start ahead)", lambda r: r["status"].get("scheduled", 0) + r["status"].get("pending", 0))
    row("started (lease running)", lambda r: r["status"].get("active", 0) + r["status"].get("provisioning", 0))
    row("instances running / failed to boot", lambda r: f"{r['servers'].get('ACTIVE', 0)} / "
        f"{r['servers'].get('ERROR', 0) + r['servers'].get('refused by Nova', 0)}")
    row("race: accepted / started", lambda r: f"{r['race_accepted']} / {r['race_started']}")
    row("GPUs booked twice, own view", lambda r: f"yes ({len(r['overbooked'])} host-moments)" if r["overbooked"]
        else "no")
    row("GPUs booked twice, Placement", lambda r: "yes" if r["placement_over"] or r["placement_hosts_over"] else "no")
    row("GPUs in use (Placement)", lambda r: sum(r["placement"].values()))
    row("seconds to send the 200", lambda r: f"{r['seconds']:.0f}")


# ---- setup and teardown -------------------------------------------------------------------

def cloud_answers() -> bool:
    try:
        urllib.request.urlopen("http://127.0.0.1:5000/v3", timeout=5)
        return os.path.exists(CLOUDS)
    except OSError:
        return False


def undo(step, *args) -> None:
    try:
        step(*args)
    except Exception as exc:   # reported, and the next step still runs
        print(f"undoing {' '.join(args)} failed: {exc}", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--only", choices=("blazar", "gpu-tenancy"))
    p.add_argument("--setup", action="store_true", help="start the loopback cloud if none answers, install and "
                   "start Blazar, and undo it all at the end")
    p.add_argument("--stop-by", help="HH:MM UTC: give up and undo everything if not done by then")
    args = p.parse_args()
    deadline = Deadline(args.stop_by)
    asks = workload(args.seed)
    print(f"workload: {len(asks)} requests (seed {args.seed}): "
          + ", ".join(f"{ph} {sum(a.phase == ph for a in asks)}" for ph in ("fill", "ahead", "beyond", "race")))
    started_cloud = filter_on = blazar_up = same = False
    results: list[dict] = []
    admin, before = None, {}
    try:
        if args.setup and not cloud_answers():
            subprocess.run(["bash", os.path.join(LOOPBACK, "install.sh")], check=True, env=ENV)
            subprocess.run(["bash", os.path.join(LOOPBACK, "start.sh")], check=True, env=ENV)
            started_cloud = True
        import openstack
        admin = openstack.connect(cloud="gt-admin")
        before = snapshot(admin)
        if args.setup and args.only != "gpu-tenancy":
            blazar_sh("install")
            blazar_up = True
            blazar_sh("start")
        t0 = time.monotonic()

        def meanwhile():
            nonlocal filter_on
            if args.only != "blazar":
                results.append(gpu_tenancy(asks, admin, deadline))
                show(results[-1])
            filter_on = True
            blazar_sh("nova-filter", "on")
        if args.only == "gpu-tenancy":
            results.append(gpu_tenancy(asks, admin, deadline))
            show(results[-1])
        else:
            results.append(blazar(asks, admin, deadline, meanwhile))
            show(results[-1])
        table(results)
        print(f"\nboth sides in {time.monotonic() - t0:.0f} s")
    finally:   # each step even when one before it failed
        if filter_on:
            undo(blazar_sh, "nova-filter", "off")
        if blazar_up:
            undo(blazar_sh, "stop")
        elif args.only != "gpu-tenancy" and not args.setup:
            undo(blazar_sh, "cleanup")
        if admin is not None and before:
            same = compare(before, snapshot(admin))
        if started_cloud:
            subprocess.run(["bash", os.path.join(LOOPBACK, "stop.sh")], env=ENV)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

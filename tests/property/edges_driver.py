"""Drives the real service (API through the Flask test client, the engine through
run_once and watch, the EdgeCloud, a VirtualClock) through a seeded random
workload at the edges of leases, and checks the invariants of edges_invariants.py
after every step.

Time moves as the running service would see it: an advance of the clock runs the
engine at every instant something is due (a start, an end, an ETA, a VM booted or
released, a notice running out), once a second while a delete is being retried,
and once a minute while a host change waits for the engine's refresh; an API
request wakes the engine at once, in the same second. Lease and server ids come
from the seed, so a seed replays the same run."""
from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.demo.seed import seed as seed_demo
from gpu_tenancy.domain.failures import FailureClass as F
from gpu_tenancy.engine import park
from gpu_tenancy.timeutil import rfc3339
from tests.property import edges_invariants as inv
from tests.property.edges_cloud import EdgeCloud

INVARIANTS = ("overcommit", "cloud", "no_valid_host", "quota", "eta", "eta_kept", "stamps", "api", "inventory")
PROJECTS = ("ml-vision", "nlp-lab")
# a third project whose quota is mostly what it may borrow ("borrow" steps): its big, long leases
# run on the others' nominal GPUs, so the others' leases reclaim them, and a notice is called off
# when the lease it was for starts elsewhere; they borrow often enough (OPS) for a few notices a run
BORROWER, BORROWER_QUOTA = "burst-lab", {"A100": (4, 24), "H100": (0, 8)}   # model -> (nominal, borrowable)
# reclaims within the run's few hours of leases (the defaults wait an hour, then give an hour's runtime)
SHARING: dict[str, Any] = {"reclaim_after_seconds": 600, "reclaim_min_runtime_seconds": 600,
                           "reclaim_notice_seconds": 600}
SHAPES = {"A100": ((1, "a100.x1"), (2, "a100.x2"), (4, "a100.x4"), (8, "a100.x8")),
          "H100": ((1, "h100.x1"), (2, "h100.x2"), (4, "h100.x4"))}
CLOUD_GPUS = {"A100": 32, "H100": 8}
CLASSES = (None, None, None, "normal", "low", "preemptible", "high")   # high: admins only in the demo
DURATIONS = (60, 120, 300, 600, 1800, 3600, 7200)
OPS = {"create": 28, "burst": 4, "borrow": 8, "make_room": 3, "advance": 40, "cancel": 7, "cancel_at_start": 4,
       "extend": 6, "slow_deletes": 1, "fail_deletes": 1, "boot_fault": 1, "host": 2, "mid_call": 3, "park": 3, "resume": 3,
       "take_freed": 0}   # take_freed: only while a notice stands (ON_NOTICE)
# while a notice stands whose lease still waits (minutes: a few steps), the ops that end its wait weigh
# more: make_room (it may start elsewhere: the notice is called off) and take_freed (the noticed GPUs are
# booked first: the call-off is refused); at the usual weights a run of 200 steps reaches neither often
ON_NOTICE = {"take_freed": 40, "make_room": 30}
RAN = ("active", "ending", "parking", "parked", "resuming")   # a lease in these has run
WAITING = ("requested", "queued")   # a notice's lease that is no longer in these has no need of it
MAX_LIVE = 24            # unfinished leases; beyond this the workload waits instead of asking
MAX_TICKS = 3000         # engine passes in one advance: more means the engine never settles
ACCEPTED = {"create": {201, 403}, "cancel": {204, 409}, "extend": {200, 400, 409}, "resume": {200, 409}}


def release_allowance(runtime) -> int:
    """The seconds the planner now allows between a lease's end and the next use of its
    GPUs, where the engine has such an allowance (engine/held.py); else none."""
    try:
        from gpu_tenancy.engine import held
    except ImportError:
        return 0
    with session_scope(runtime.sessions) as session:
        return held.allowance(session, runtime.planner_settings.release_floor)


@contextlib.contextmanager
def seeded_ids(seed: int):
    """uuid4 from the seed while the run lasts: lease and server ids, and so every
    order that ties on them, are the same on every replay."""
    rng, real = random.Random(seed), uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = real


@dataclass
class Report:
    seed: int
    steps: int = 0
    seconds: float = 0.0
    checks: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)        # steps of each kind
    quiet_steps: int = 0     # steps over which ETAs were held to the real starts
    notices: int = 0         # early ends decided (reclaims and preemptions)
    call_offs: int = 0       # early ends given back to a lease that still runs
    refused: int = 0         # notices that stood though the lease they were for no longer waited
    tolerated: list = field(default_factory=list)   # (step, text): what a release later than planned broke
    violations: dict = field(default_factory=lambda: defaultdict(list))   # invariant -> [(step, text)]
    log: list = field(default_factory=list)                                # one line per step

    def explain(self, invariant: str, context: int = 25) -> str:
        found = self.violations.get(invariant) or []
        if not found:
            return f"seed {self.seed}: {invariant} held over {self.steps} steps"
        first = found[0][0]
        lines = [f"seed {self.seed}: {invariant} broken {len(found)} times in {self.steps} steps; the first:"]
        lines += [f"  step {step}: {text}" for step, text in found[:5]]
        lines.append(f"replay: python bench/edges_property.py --seeds {self.seed} --steps {first}; "
                     f"the steps before it:")
        lines += ["  " + line for line in self.log[max(0, first - context):first]]
        return "\n".join(lines)


class Driver:
    def __init__(self, app, seed: int):
        self.rt = app.extensions["gpu_tenancy"]
        self.clock, self.cloud, self.sessions = self.rt.clock, self.rt.cloud, self.rt.sessions
        assert isinstance(self.cloud, EdgeCloud), "the app needs the EdgeCloud"
        self.client = app.test_client()
        self.rng = random.Random(seed)
        self.report = Report(seed)
        self.last_event, self.boots_seen = 0, 0
        self.last_at: dict[str, int] = {}   # lease -> its latest event (inv.stamps)
        self.etas: dict[str, int] = {}   # queued lease -> its ETA at the last look for what is due
        self.allowance = 0
        self.allowances: list[tuple[int, int]] = []   # (when, the release allowance then), at each step
        self.seen: set[str] = set()
        self.snap = inv.read(self.sessions, self.clock.now(), 0)
        self.noticed_last: set[str] = set()     # leases under notice at the last look
        self.noticed_before: set[str] = set()   # ... at the step's start
        self.noticed_in_step: set[str] = set()  # ... at any look in the step
        self.refused: set[str] = set()          # leases whose notice was not called off, though unneeded
        self.ran: set[str] = set()              # leases seen running (or past it)
        self.booting_ends: dict[tuple[str, int, str], int] = {}   # Snapshot.booting_ends
        self.booting_deadlines: dict[tuple[str, int, str], int] = {}   # Snapshot.booting_deadlines

    # --- the run -------------------------------------------------------------------------------
    def run(self, steps: int) -> Report:
        wall = time.perf_counter()
        with seeded_ids(self.report.seed):
            for step in range(1, steps + 1):
                op = self.pick()
                self.report.log.append(f"{step} {rfc3339(self.clock.now())} {op}")
                self.report.ops[op["op"]] += 1
                quiet = op["op"] == "advance" and self.settled()
                self.noticed_before = self.under_notice(self.snap)
                self.noticed_in_step = set(self.noticed_before)
                fired, before = len(self.cloud.fired), self.snap
                self.allowance = release_allowance(self.rt)   # as the plan before the step had it
                self.allowances.append((self.clock.now(), self.allowance))
                self.apply(step, op)
                quiet = quiet and len(self.cloud.fired) == fired and not self.cloud.fault_pending()
                self.check(step, before, quiet)
        self.report.steps, self.report.seconds = steps, time.perf_counter() - wall
        return self.report

    def settled(self) -> bool:
        """Nothing injected still to fire or still in play, and the engine sees the hosts as they are."""
        cloud_hosts = {h.name: h.up and h.enabled for h in self.cloud.capacity()}
        return (not self.cloud.armed() and not self.cloud.fault_pending()
                and all(open_ == cloud_hosts[name] for name, (_, _, open_) in self.snap.hosts.items()))

    def check_state(self, step: int) -> inv.Snapshot:
        """The promises that hold at every instant: after each engine pass, and after each step."""
        snap = inv.read(self.sessions, self.clock.now(), self.last_event, self.rt.config.boot_timeout_seconds)
        self.note_booting_ends(snap)
        late: list[str] = []
        allowance = self.committed_allowance(snap)
        self.record(step, "overcommit", inv.overcommit(snap, allowance, late))
        self.record(step, "cloud", inv.cloud_agrees(snap, self.cloud.holders(), self.cloud.free_gpus()))
        self.record(step, "inventory", inv.lease_inventory(snap, self.cloud.lease_inventory()))
        self.record(step, "quota", inv.quotas(snap, allowance, late))
        self.report.tolerated += [(step, text) for text in late if text not in self.seen]
        self.seen.update(late)
        self.record(step, "stamps", inv.stamps(snap, self.last_at))
        self.last_event = max([self.last_event] + [e[0] for e in snap.events])
        self.count_notices(snap)
        return snap

    def note_booting_ends(self, snap: inv.Snapshot) -> None:
        """Each VM's planned end on its host while its lease boots, until the lease runs
        (Snapshot.booting_ends): the placement a VM is dropped from is the last seen there.
        And its start's deadline then (Snapshot.booting_deadlines)."""
        ran = {lid for lid, lease in snap.leases.items() if lease.status in RAN}
        self.ran |= ran
        booting = {lid for lid, lease in snap.leases.items() if lease.status == "provisioning" and lid not in self.ran}
        self.booting_ends = {key: end for key, end in self.booting_ends.items() if key[0] not in ran}
        self.booting_deadlines = {key: at for key, at in self.booting_deadlines.items() if key[0] not in ran}
        seen = [sp for sp in snap.spans if sp.lease in booting and not sp.unreleased]
        self.booting_ends.update({(sp.lease, sp.vm, sp.host): sp.end for sp in seen})
        self.booting_deadlines.update({(sp.lease, sp.vm, sp.host): snap.start_deadlines[sp.lease] for sp in seen
                                       if sp.lease in snap.start_deadlines})
        snap.booting_ends, snap.booting_deadlines = self.booting_ends, self.booting_deadlines

    @staticmethod
    def under_notice(snap: inv.Snapshot) -> set[str]:
        return {i for i, lease in snap.leases.items() if lease.early_end is not None}

    def count_notices(self, snap: inv.Snapshot) -> None:
        """Early ends decided, and called off, since the last look (each engine pass is looked at);
        every notice seen in a step makes it not quiet, though its lease has ended by the step's end."""
        now = self.under_notice(snap)
        self.report.notices += len(now - self.noticed_last)
        self.report.call_offs += sum(1 for i in self.noticed_last - now
                                     if i in snap.leases and snap.leases[i].status == "active")
        self.noticed_last = now
        self.noticed_in_step |= now
        # each engine pass, and each replan of the API, calls off what it can before it is looked at: a
        # notice still standing for a lease that no longer waits was refused (its GPUs are promised again);
        # each lease under notice has an early end
        self.refused |= {i for i in now if snap.leases[i].status == "active"
                         and (end := snap.leases[i].early_end) is not None and end > snap.now
                         and not waits(snap, snap.leases[i].early_end_for)}
        self.report.refused = len(self.refused)

    def committed_allowance(self, snap: inv.Snapshot) -> int:
        """The lowest release allowance since the oldest holding lease was placed: a lease keeps the
        gap after its predecessor's end it was planned with, when the allowance grows later."""
        oldest = min(snap.committed.values(), default=snap.now)
        since = [a for t, a in self.allowances if t > oldest]
        before = [a for t, a in self.allowances if t <= oldest][-1:]   # the one in force then
        return min(before + since, default=self.allowance)

    def check(self, step: int, before: inv.Snapshot, quiet: bool) -> None:
        after = self.check_state(step)
        boots, self.boots_seen = self.cloud.boots[self.boots_seen:], len(self.cloud.boots)
        self.record(step, "no_valid_host", inv.no_valid_host(boots))
        self.record(step, "eta", inv.etas(after))
        noticed, earlier = self.noticed_in_step, self.noticed_before
        # a lease parking gives its GPUs back early, as an early end does: not quiet
        parking = {i for snap in (before, after) for i, lease in snap.leases.items() if lease.status == "parking"}
        parked = {i for i, lease in after.leases.items() if lease.status == "parked"}
        parked_before = {i for i, lease in before.leases.items() if lease.status == "parked"}
        if quiet and after.hosts == before.hosts and noticed <= earlier and not parking \
                and parked <= parked_before:   # no reclaim, preemption or park decided
            self.report.quiet_steps += 1
            booted = got_gpus(boots)
            with self.sessions() as s:
                L = m.Lease
                kinds = s.execute(select(L.id, L.gpu_model, L.borrowing, L.preemptible)
                                  .where(L.id.in_(list(booted)))).all()
            idle_only, borrowed = {r.id for r in kinds if r.preemptible}, {r.gpu_model for r in kinds if r.borrowing}
            late: list[str] = []
            self.record(step, "eta_kept", inv.kept_etas(before, after, booted, self.allowance, idle_only, borrowed,
                                                        late))
            self.report.tolerated += [(step, text) for text in late if text not in self.seen]
            self.seen.update(late)
        self.snap = after

    def record(self, step: int, invariant: str, result: tuple[int, list[str]]) -> None:
        checks, bad = result
        self.report.checks[invariant] += checks
        for text in bad:   # a broken promise that stays broken is told once
            if text not in self.seen:
                self.seen.add(text)
                self.report.violations[invariant].append((step, f"{rfc3339(self.clock.now())}: {text}"))

    # --- the workload ----------------------------------------------------------------------------
    def open_notices(self) -> list[inv.Lease]:
        """Leases under notice whose notice can still be called off: the lease it is for waits."""
        snap = self.snap
        return [lease for lease in snap.leases.values() if lease.status == "active" and lease.early_end is not None
                and lease.early_end > snap.now and waits(snap, lease.early_end_for)]

    def pick(self) -> dict:
        r, live = self.rng, list(self.snap.leases.values())
        weights = {**OPS, **ON_NOTICE} if self.open_notices() else OPS
        kind = r.choices(list(weights), weights=list(weights.values()))[0]
        if kind in ("create", "burst", "borrow", "mid_call") and len(live) >= MAX_LIVE:
            kind = "advance"
        if kind in ("cancel", "extend") and not live:
            kind = "create"
        if kind == "advance":
            return {"op": "advance", "seconds": r.choice([0, 1, r.randint(2, 30), r.randint(60, 900),
                                                          r.choice([1800, 3600])])}
        if kind == "create":
            return {"op": kind, **self.new_lease()}
        if kind == "borrow":
            model = r.choices(("A100", "H100"), weights=(7, 3))[0]
            gpus, shape = SHAPES[model][-1]
            body = {"shape": shape, "duration": r.choice((3600, 7200, 14400)),
                    "instances": r.randint(1, CLOUD_GPUS[model] // gpus // 2)}
            return {"op": "borrow", "project": BORROWER, "admin": False, "body": body}
        if kind == "mid_call":   # asked when it fires, some steps on: for "now"
            ask = self.new_lease()
            ask["body"].pop("start", None)
            return {"op": kind, **ask}
        if kind == "burst":   # one project asks several times in the same second
            project = r.choice(PROJECTS)
            return {"op": "burst", "asks": [self.new_lease(project) for _ in range(r.randint(2, 3))]}
        if kind == "cancel":
            return {"op": "cancel", "lease": r.choice(live).id}
        if kind == "make_room":   # a lease ends early while another is under notice: the notice's lease may
            noticed = {lease.model for lease in live if lease.early_end is not None}   # start there instead
            others = sorted(lease.id for lease in live if lease.model in noticed and lease.status == "active"
                            and lease.early_end is None)
            return {"op": "make_room", "lease": r.choice(others) if others else None}
        if kind == "take_freed":
            return self.take_freed()
        if kind == "cancel_at_start":   # in the very second it begins provisioning
            planned = sorted((lease.start, lease.id) for lease in live if lease.status == "scheduled")
            if not planned:
                return {"op": "advance", "seconds": 1}
            return {"op": "cancel_at_start", "lease": planned[0][1], "at": max(planned[0][0], self.clock.now())}
        if kind == "park":   # an idle rule's park (engine/park.py), as if its agent reported 0 %
            running = sorted(lease.id for lease in live if lease.status == "active")
            return {"op": "park", "lease": r.choice(running)} if running else {"op": "advance", "seconds": 1}
        if kind == "resume":   # the tenant asks for a parked lease back (sooner than its held slot)
            parked = sorted(lease.id for lease in live if lease.status == "parked")
            return {"op": "resume", "lease": r.choice(parked)} if parked else {"op": "advance", "seconds": 1}
        if kind == "extend":
            return {"op": "extend", "lease": r.choice(live).id, "by": r.choice([-600, -60, 60, 300, 1800])}
        if kind == "slow_deletes":
            return {"op": "slow_deletes", "count": r.randint(1, 3), "seconds": r.choice([15, 30, 60])}
        if kind == "fail_deletes":
            return {"op": "fail_deletes", "times": r.randint(1, 3)}
        if kind == "boot_fault":
            return {"op": "boot_fault", **r.choice([{"call": "server_error", "class": F.NO_VALID_HOST.value},
                                                    {"call": "server_error", "class": F.BOOT_TIMEOUT.value},
                                                    {"call": "boot", "class": F.API_ERROR.value},
                                                    # a VM that fails off the shelf at a resume (resume.py)
                                                    {"call": "unshelve_error", "class": F.NO_VALID_HOST.value}])}
        down = sorted(name for name, h in self.snap.hosts.items() if not h[2])
        if down and (len(down) >= 2 or r.random() < 0.5):
            return {"op": "host", "host": r.choice(down), "up": True}
        return {"op": "host", "host": r.choice(sorted(self.snap.hosts)), "up": False}

    def take_freed(self) -> dict:
        """An admin books, at high priority (planned before the lease a notice is for), what the notice
        frees: its lease's VMs, or now and then one VM of any shape, from the instant its GPUs are back (its
        end plus the release allowance: a booking from then is committed at once). Then the notice's lease
        no longer waits: it is cancelled, or a lease of its model ends (it may start there). The booking,
        if on the noticed GPUs, holds them: the notice must stand, or the host is over-committed."""
        r = self.rng
        noticed = r.choice(self.open_notices())
        assert noticed.early_end is not None and noticed.early_end_for is not None   # as open_notices has them
        vms = [sp.gpus for sp in self.snap.spans if sp.lease == noticed.id and not sp.unreleased]
        shape = dict(SHAPES[noticed.model]).get(max(vms, default=0))
        if shape is None or r.random() < 0.3:
            _, shape = r.choice(SHAPES[noticed.model])
            vms = [0]
        body = {"shape": shape, "duration": r.choice(DURATIONS), "instances": len(vms), "priority_class": "high",
                "start": rfc3339(noticed.early_end + release_allowance(self.rt))}
        others = sorted(lease.id for lease in self.snap.leases.values() if lease.model == noticed.model
                        and lease.status == "active" and lease.early_end is None)
        then = r.choice(others) if others and r.random() < 0.5 else noticed.early_end_for
        return {"op": "take_freed", "project": r.choice(PROJECTS), "admin": True, "body": body, "lease": then}

    def new_lease(self, project: str | None = None) -> dict:
        r, now = self.rng, self.clock.now()
        project = project or r.choice(PROJECTS)
        model = r.choices(("A100", "H100"), weights=(7, 3))[0]
        gpus, shape = r.choice(SHAPES[model])
        body = {"shape": shape, "duration": r.choice(DURATIONS),
                "instances": min(r.choice((1, 1, 1, 2, 2, 3)), CLOUD_GPUS[model] // gpus)}
        ends = sorted(lease.end for lease in self.snap.leases.values() if lease.end and lease.end > now)
        start = r.random()
        if start < 0.15 and ends:        # exactly when another lease ends
            body["start"] = rfc3339(r.choice(ends))
        elif start < 0.35:
            body["start"] = rfc3339(now + r.choice((1, 5, 30, 60, 300, 1800)))
        klass = r.choice(CLASSES)
        if klass:
            body["priority_class"] = klass
        if r.random() < 0.05:
            body["volume"] = {"size_gb": 10}
        return {"project": project, "admin": klass == "high", "body": body}

    # --- carrying it out -----------------------------------------------------------------------
    def apply(self, step: int, op: dict) -> None:
        kind, cloud = op["op"], self.cloud
        if kind == "advance":
            self.advance(op["seconds"], step)
        elif kind in ("create", "borrow"):
            self.ask(step, op)
            self.tick()
        elif kind == "burst":
            for ask in op["asks"]:
                self.ask(step, ask)
            self.tick()
        elif kind == "mid_call":   # served while the engine waits on the cloud to delete a VM, a second later
            def mid_call() -> None:
                self.clock.advance(1)
                self.ask(step, op)
            cloud.during_next_call = mid_call
        elif kind == "make_room" and op["lease"] is None:   # nothing under notice: time goes on
            self.advance(60, step)
        elif kind in ("cancel", "make_room"):
            self.call(step, "cancel", "delete", op["lease"])
            self.tick()
        elif kind == "take_freed":
            self.ask(step, op)
            self.tick()
            self.call(step, "cancel", "delete", op["lease"])
            self.tick()
        elif kind == "cancel_at_start":
            self.advance(op["at"] - self.clock.now(), step)
            self.call(step, "cancel", "delete", op["lease"])
            self.tick()
        elif kind == "extend":
            lease = self.snap.leases.get(op["lease"])
            duration = max(60, (lease.end - lease.start if lease and lease.end and lease.start else 600) + op["by"])
            self.call(step, "extend", "patch", op["lease"], json={"duration": duration})
            self.tick()
        elif kind == "park":
            park.begin(self.rt.engine.lifecycle, op["lease"], "idle (the property test's park)")
            self.tick()
        elif kind == "resume":
            project = self.snap.leases[op["lease"]].project
            reply = self.client.post(f"/v1/leases/{op['lease']}/resume", headers=identity(project))
            self.answered(step, "resume", reply)
            self.tick()
        elif kind == "slow_deletes":
            cloud.slow_down_deletes(op["count"], op["seconds"])
        elif kind == "fail_deletes":
            cloud.inject_failure("delete_server", F.API_ERROR, times=op["times"])
        elif kind == "boot_fault":
            cloud.inject_failure(op["call"], F(op["class"]))
        elif kind == "host":
            cloud.set_host_state(op["host"], up=op["up"])

    def ask(self, step: int, ask: dict) -> None:
        roles = "admin" if ask["admin"] else "member"
        reply = self.client.post("/v1/leases", json=ask["body"], headers=identity(ask["project"], roles))
        self.answered(step, "create", reply)

    def call(self, step: int, what: str, method: str, lease_id: str, **kw) -> None:
        project = self.snap.leases[lease_id].project if lease_id in self.snap.leases else PROJECTS[0]
        reply = getattr(self.client, method)(f"/v1/leases/{lease_id}", headers=identity(project), **kw)
        self.answered(step, what, reply)

    def answered(self, step: int, what: str, reply) -> None:
        if reply.status_code not in ACCEPTED[what]:
            text = reply.get_data(as_text=True)[:300]
            self.record(step, "api", (0, [f"{what} answered {reply.status_code}: {text}"]))

    def tick(self) -> None:
        self.rt.engine.run_once()

    def advance(self, seconds: int, step: int) -> None:
        """Move the clock on by `seconds`, running the engine whenever something is due."""
        target = self.clock.now() + max(0, seconds)
        for _ in range(MAX_TICKS):
            when, cloud_only = self.next_due()
            if when is None or when >= target:
                break
            self.clock.set(when)
            if not cloud_only or self.rt.engine.lifecycle.watch():   # the light pass; a release wakes a tick
                self.tick()
            self.check_state(step)
        else:
            self.record(step, "api", (0, [f"the engine ran {MAX_TICKS} passes without settling"]))
        self.clock.set(max(target, self.clock.now()))
        self.tick()

    def next_due(self) -> tuple[int | None, bool]:
        """The next instant the engine has something to do, and whether only the cloud changes then."""
        now, due = self.clock.now(), []
        with self.sessions() as s:
            L = m.Lease
            rows = s.execute(select(L.id, L.status, L.start_at, L.end_at, L.queue_eta, L.early_end_at, L.earliest_start,
                                    L.resume_by)
                             .where(L.status.in_(("queued", "scheduled", "provisioning", "active", "ending",
                                                  "parking", "parked", "resuming")))).all()
            hosts = {h.name: h.up and h.enabled for h in s.scalars(select(m.Host))}
        timeout, etas = self.rt.config.boot_timeout_seconds, {}
        for r in rows:
            start, end, eta, early = map(to_epoch, (r.start_at, r.end_at, r.queue_eta, r.early_end_at))
            if r.status == "queued" and eta is not None:
                etas[r.id] = eta
                if eta <= now + 1 and self.etas.get(r.id) != eta:   # "any second now", moving with the clock:
                    eta = now + self.rt.config.engine_tick_seconds   # the runner's periodic tick looks
            due += {"scheduled": [start], "active": [end, early], "queued": [eta, to_epoch(r.earliest_start)],
                    "provisioning": [start + timeout + 1 if start else None],
                    "parked": [to_epoch(r.resume_by)]}.get(r.status, [])
        self.etas = etas
        stalled = {r.id for r in rows if r.status == "ending"} & self.cloud.undeleted_leases()
        if any(r.status in ("parking", "resuming") for r in rows):
            stalled.add("")   # a shelve or unshelve under way: the engine looks again within a second
        if stalled:
            due.append(now + 1)   # a delete the cloud refused: the engine tries again within a second
        if hosts != {h.name: h.up and h.enabled for h in self.cloud.capacity()}:
            due.append(now + self.rt.config.host_refresh_seconds)   # the engine's next look at the hosts
        due = [t for t in due if t is not None and t > now]
        change = self.cloud.next_change()
        first = min(due, default=None)
        if change is not None and (first is None or change < first):
            return change, True
        return first, False


def waits(snap: inv.Snapshot, lease_id: str | None) -> bool:
    """Whether the lease waits for GPUs (one finished is not in the snapshot: it does not)."""
    lease = snap.leases.get(lease_id) if lease_id else None
    return lease is not None and lease.status in WAITING


def got_gpus(boots) -> dict[str, int]:
    """lease -> when the cloud took the last of its VMs' boots (leases with a refused boot left out)."""
    taken: dict[str, int] = {}
    refused = {b.lease_id for b in boots if b.refused}
    for b in boots:
        if b.lease_id not in refused:
            taken[b.lease_id] = max(b.at, taken.get(b.lease_id, b.at))
    return taken


def identity(project: str, roles: str = "member") -> dict:
    return {"X-Project-Id": project, "X-User-Id": f"{project}-user", "X-Roles": roles}


def run(app, seed: int, steps: int) -> Report:
    return Driver(app, seed).run(steps)


def make_app(database_url: str, start: int):
    """The app as the tests' fixtures make it (demo catalog, hosts known, engine not
    started), on the EdgeCloud; the database must be migrated."""
    clock = VirtualClock(start)
    cloud = EdgeCloud.from_file(DEMO_CLOUD, clock)
    config = Config.load(database_url=database_url, auth_strategy="noauth2", run_engine=True, **SHARING)
    app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed_demo(session, clock.now(), cloud.images())
        for model, (gpus, borrow) in BORROWER_QUOTA.items():
            session.add(m.Quota(project_id=BORROWER, gpu_model=model, gpus=gpus, borrow_gpus=borrow,
                                max_duration=2 * 86400, weight=1.0, updated_at=utcnow_naive(clock.now())))
    runtime.engine.lifecycle.refresh_hosts()
    return app

"""A lease's webhook notices reach its project's receiver in the order they were written, each
once, and none is lost once the receiver answers again: seeded random steps over several leases
of three projects (notices the engine writes by its transitions and its before-end warning),
receivers that fail (5xx, time-outs, refused connections, a hung receiver holding its workers)
and recover, and a clock that jumps. After every pass of the outbox worker and at the end:

- order: a lease's notices are tried one at a time, never one before an earlier is done;
- once: nothing is tried again after a 2xx, and the outbox's record agrees with the receiver's;
- bounded: at most `webhook_max_attempts` tries each, never before the backoff has passed;
- none lost: once every receiver answers, every notice is delivered or was given up after all
  its tries failed;
- fair: in every pass, every project with a notice due gets a worker, whatever another
  project's receiver does; none gets more than its share; and the projects whose receivers
  fail (a notice waiting for a retry, or a try failed lately) hold no more than the workers
  outside the reserve, which stay for the others (a hung one holds its share and no more)."""
from __future__ import annotations

import json
import random
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest
from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.engine import webhooks
from gpu_tenancy.engine.outbox import DeadlinePassed, Outbox
from tests.conftest import headers

PROJECTS = ("ml-vision", "nlp-lab", "cv-lab")
# each project's receiver on its own host, or all on one (a shared relay or gateway, a path each)
OWN = {p: f"http://127.0.0.{i + 2}:8080/hooks/{p}" for i, p in enumerate(PROJECTS)}
SHARED = {p: f"http://127.0.0.2:8080/hooks/{p}" for p in PROJECTS}
MODES = ("up", "up", "5xx", "timeout", "refused", "hung")
SEEDS = range(10)
STEPS = 50
LEAD = 600


@dataclass
class Attempt:
    at: int
    project: str
    delivery: int
    lease: str
    ok: bool


@dataclass
class Receivers:
    """Each project's receiver, in the mode the run set; what each was sent, in order."""
    clock: object
    mode: dict = field(default_factory=lambda: dict.fromkeys(PROJECTS, "up"))
    tried: list = field(default_factory=list)
    hung: int = 0
    unhooked: set = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # sends under way at once: per project, and of the projects `watched` (those failing), the
    # most seen since `watch` was called (a pass's tries, counted instead, depend on how fast a
    # refused send gives its worker back within the pass, not on what the outbox holds at once)
    under_way: Counter = field(default_factory=Counter)
    watched: frozenset = frozenset()
    peak: Counter = field(default_factory=Counter)
    peak_watched: int = 0

    def watch(self, projects) -> None:
        with self.lock:
            self.watched, self.peak, self.peak_watched = frozenset(projects), Counter(), 0

    def send(self, target, body, head, deadline):
        project = target.path.rsplit("/", 1)[1]
        mode = self.mode[project]
        seen = Attempt(self.clock.now(), project, int(head[webhooks.DELIVERY_HEADER]),
                       json.loads(body)["lease"]["id"], mode == "up")
        with self.lock:
            self.tried.append(seen)
            self.under_way[project] += 1
            self.peak[project] = max(self.peak[project], self.under_way[project])
            self.peak_watched = max(self.peak_watched, sum(self.under_way[p] for p in self.watched))
        try:
            return self._answer(mode, deadline)
        finally:
            with self.lock:
                self.under_way[project] -= 1

    def _answer(self, mode: str, deadline: float):
        if mode == "hung":   # holds its worker until the pass is over, as a receiver up to the deadline
            with self.lock:
                self.hung += 1
            self.release.wait(30)
            raise DeadlinePassed(f"no answer within {deadline:g} s")
        if mode == "timeout":
            raise DeadlinePassed(f"no answer within {deadline:g} s")
        if mode == "refused":
            raise ConnectionRefusedError(111, "Connection refused")
        return {"up": 204, "5xx": 503}[mode]


def notices(runtime) -> dict[int, tuple]:
    with session_scope(runtime.sessions) as session:
        return {d.id: (d.project_id, d.lease_id, d.status, d.attempts, to_epoch(d.next_attempt_at))
                for d in session.scalars(select(m.WebhookDelivery))}


def attempts_by_project(runtime) -> dict[str, int]:
    count: dict[str, int] = defaultdict(int)
    for project, _, _, attempts, _ in notices(runtime).values():
        count[project] += attempts
    return count


def due_heads(runtime, now: int) -> dict[str, int]:
    """Per project, how many of its leases have their oldest pending notice due."""
    heads: dict[str, tuple] = {}
    for _id, (project, lease, status, _, next_at) in sorted(notices(runtime).items()):
        if status == "pending" and lease not in heads:
            heads[lease] = (project, next_at <= now)
    count: dict[str, int] = defaultdict(int)
    for project, due in heads.values():
        count[project] += due
    return count


def backoff(config, attempt: int) -> int:
    return min(config.webhook_backoff_seconds * 2 ** (attempt - 1), config.webhook_backoff_max_seconds)


def make_leases(client, runtime, rng, receivers: dict) -> list[str]:
    with session_scope(runtime.sessions) as session:   # a third project, with the demo's quota
        session.add(m.Quota(project_id="cv-lab", gpu_model="A100", gpus=16, borrow_gpus=0, max_duration=86400,
                            weight=1.0, updated_at=utcnow_naive(runtime.clock.now())))
    for project in PROJECTS:
        reply = client.put(f"/v1/webhooks/{project}", json={"webhook": {"url": receivers[project]}},
                           headers=headers(project))
        assert reply.status_code == 200, reply.get_json()
    leases = []
    for i in range(rng.randint(5, 14)):
        project = PROJECTS[i % 3] if i < 3 else rng.choice(PROJECTS)
        reply = client.post("/v1/leases", json={"shape": "a100.x1", "duration": rng.choice(["PT20M", "PT1H"])},
                            headers=headers(project))
        assert reply.status_code == 201, reply.get_json()
        leases.append(reply.get_json()["lease"]["id"])
    runtime.engine.run_once()
    return leases


def rehook(client, project: str, where: dict | None, receivers) -> None:
    """None: the webhook removed. Its notices due meanwhile are dropped, and none is written."""
    if where is None:
        if project not in receivers.unhooked:
            assert client.delete(f"/v1/webhooks/{project}", headers=headers(project)).status_code == 204
            receivers.unhooked.add(project)
        return
    reply = client.put(f"/v1/webhooks/{project}", json={"webhook": {"url": where[project]}}, headers=headers(project))
    assert reply.status_code == 200, reply.get_json()
    receivers.unhooked.discard(project)


def transition(runtime, lease_id: str, events: list[str]) -> None:
    """What the engine writes with a transition of the lease (idle, parked, resumed), in its transaction."""
    now = runtime.clock.now()
    with session_scope(runtime.sessions) as session:
        row = session.get_one(m.Lease, lease_id)
        for event in events:
            webhooks.enqueue(session, row, event, webhooks.idle_payload(row, now, 0, event), now)


def failing(runtime, receivers, now: int) -> set[str]:
    """The projects whose receivers fail: a notice waits for a retry, or a try failed lately."""
    waiting = {project for project, _, status, attempts, _ in notices(runtime).values()
               if status == "pending" and attempts > 0}
    with receivers.lock:
        lately = {a.project for a in receivers.tried
                  if not a.ok and now - a.at < runtime.config.webhook_backoff_max_seconds}
    return waiting | lately


def one_pass(outbox, receivers, runtime, broken, step) -> None:
    """A pass of the outbox worker, checked to be fair, then waited for to its end."""
    config, now = runtime.config, runtime.clock.now()
    heads = due_heads(runtime, now)
    failing_now = failing(runtime, receivers, now)
    receivers.watch(failing_now)
    before = attempts_by_project(runtime)
    receivers.release.clear()
    receivers.hung = 0
    outbox.run_once()
    for _ in range(2000):   # until the sends still under way are the hung receivers' (the others' end at once)
        with receivers.lock:
            if outbox.sending() <= receivers.hung:
                break
        outbox.wait(0.005)
    receivers.release.set()
    assert outbox.wait(30)
    after = attempts_by_project(runtime)
    tried = {project: after[project] - before[project] for project in PROJECTS}   # sent, or dropped unhooked
    for project, n in heads.items():
        if tried[project] < min(n, 1) or receivers.peak[project] > config.webhook_workers_per_target:
            broken.append(f"step {step}: {project} had {n} lease(s) with a notice due at {now}, "
                          f"{tried[project]} tried, {receivers.peak[project]} at once (modes {receivers.mode})")
    if receivers.peak_watched > config.webhook_workers - config.webhook_workers_reserved:
        broken.append(f"step {step}: the failing receivers of {sorted(failing_now)} held {receivers.peak_watched} "
                      f"workers at once, past those outside the reserve (modes {receivers.mode})")


def check(runtime, receivers, broken) -> None:
    config = runtime.config
    rows = notices(runtime)
    by_delivery: dict[int, list[Attempt]] = defaultdict(list)
    by_lease: dict[str, list[Attempt]] = defaultdict(list)
    for a in receivers.tried:
        by_delivery[a.delivery].append(a)
        by_lease[a.lease].append(a)
    for lease, tried in by_lease.items():
        ids = [a.delivery for a in tried]
        if ids != sorted(ids):
            broken.append(f"lease {lease}: notices tried in the order {ids}")
    for id_, (_project, _lease, status, attempts, _) in rows.items():
        tried = by_delivery.get(id_, [])
        oks = [a for a in tried if a.ok]
        if status == "pending":
            broken.append(f"notice {id_}: still pending after every receiver answered ({len(tried)} tries)")
        elif status == "delivered" and (len(oks) != 1 or not tried[-1].ok):
            broken.append(f"notice {id_}: delivered, yet {len(oks)} 2xx of {len(tried)} tries")
        elif status == "failed" and (oks or len(tried) != config.webhook_max_attempts):
            broken.append(f"notice {id_}: given up after {len(tried)} tries, {len(oks)} answered 2xx")
        elif status == "dropped" and (oks or attempts != len(tried) + 1):   # its last, with no webhook
            broken.append(f"notice {id_}: dropped after {len(tried)} tries, {len(oks)} answered 2xx")
        elif status not in ("delivered", "failed", "dropped"):
            broken.append(f"notice {id_}: {status}")
        if attempts != len(tried) + (status == "dropped") or len(tried) > config.webhook_max_attempts:
            broken.append(f"notice {id_}: {attempts} attempts recorded, {len(tried)} received")
        for k in range(1, len(tried)):
            if tried[k].at - tried[k - 1].at < backoff(config, k):
                broken.append(f"notice {id_}: try {k + 1} at {tried[k].at}, {tried[k].at - tried[k - 1].at} s "
                              f"after the one before (backoff {backoff(config, k)} s)")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_leases_notices_arrive_in_order_once_and_none_is_lost(client, runtime, seed):
    rng = random.Random(seed)
    config = runtime.config
    config.warn_before_end_seconds = LEAD
    config.webhook_allowed_networks = ["127.0.0.0/8"]
    config.webhook_workers_per_target = rng.choice([1, 2])
    config.webhook_workers = len(PROJECTS) * config.webhook_workers_per_target + rng.choice([0, 2])
    # leaves a worker for each project's receiver, failing or not, outside the reserve
    config.webhook_workers_reserved = rng.randint(0, config.webhook_workers - len(PROJECTS))
    config.webhook_max_attempts = rng.choice([2, 3, 6])
    receivers = Receivers(runtime.clock)
    outbox = Outbox(runtime.sessions, runtime.clock, config, send=receivers.send)
    broken: list[str] = []
    try:
        leases = make_leases(client, runtime, rng, rng.choice([OWN, SHARED]))
        for step in range(STEPS):
            kind = rng.random()
            if kind < 0.4:
                transition(runtime, rng.choice(leases), rng.choice(
                    [[webhooks.IDLE], [webhooks.PARKED], [webhooks.RESUMED], [webhooks.PARKED, webhooks.RESUMED],
                     [webhooks.IDLE, webhooks.PARKED]]))
            elif kind < 0.55:
                receivers.mode[rng.choice(PROJECTS)] = rng.choice(MODES)
            elif kind < 0.6:   # a project moves its webhook (its own host or the shared one), or removes it
                rehook(client, rng.choice(PROJECTS), rng.choice([OWN, SHARED, None]), receivers)
            elif kind < 0.65:
                runtime.engine.run_once()   # the before-end warnings, as the engine writes them
            else:
                runtime.clock.advance(rng.choice([1, 5, 10, 30, 60, 300, 900]))
            one_pass(outbox, receivers, runtime, broken, step)
        receivers.mode = dict.fromkeys(PROJECTS, "up")
        for project in PROJECTS:
            if project in receivers.unhooked:
                rehook(client, project, OWN, receivers)
        for _ in range(len(notices(runtime)) * config.webhook_max_attempts):   # a bound: one a pass at the least
            if all(status != "pending" for _, _, status, _, _ in notices(runtime).values()):
                break
            runtime.clock.advance(config.webhook_backoff_max_seconds)
            one_pass(outbox, receivers, runtime, broken, "end")
        check(runtime, receivers, broken)
        assert len(receivers.tried) >= 5   # the run sends something
    finally:
        receivers.release.set()
        outbox.stop()
        outbox.wait(10)
    assert not broken, f"seed {seed}:\n" + "\n".join(broken[:10]) + f"\n({len(broken)} in all)"

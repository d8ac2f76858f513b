"""Tenants and the engine at once on PostgreSQL, seeded: worker threads ask for, cancel, extend,
shrink, rename, end and take offers for leases of four projects through the API, one thread runs
engine passes with the clock moved on, and a checker reads the ledger in REPEATABLE READ
snapshots. In every snapshot and at the end: no host holds more GPUs than it has and no project
more than its quota and borrowing allow, at any instant; a lease holds allocations exactly when
its state says it does. Every answer is one its request may give, never a 5xx.

Each thread draws from its own random.Random seeded from SEED (GPU_TENANCY_SEED to try others):
its choices are reproducible, the interleaving is not. Every failure message names the seed."""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import sessionmaker

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import FINAL, LeaseState
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import PG_URL, headers
from tests.consistency import assert_consistent
from tests.ledger_checks import holding_mismatches_in, overcommits_in, quota_overruns_in

pytestmark = [pytest.mark.skipif(not PG_URL, reason="on SQLite every transaction holds the database's write lock "
                                                    "from its start: nothing runs at once"),
              pytest.mark.long]   # over a minute: run first (tests/conftest.py)
SEED = int(os.environ.get("GPU_TENANCY_SEED", "20261201"))
WORKERS, OPS = 5, 400
# astro has no quota: its creates are refused; small-lab's quota is small and has a budget
PROJECTS = ["ml-vision"] * 4 + ["nlp-lab"] * 4 + ["small-lab"] * 2 + ["astro"]
SHAPES = ["a100.x1", "a100.x2", "a100.x4", "a100.x8", "h100.x1", "h100.x2", "h100.x4"]
RECENT = 12   # the leases a worker acts on: its last ones
NAMES = ["train", "eval", "sweep"]   # few, so that names clash
ADMIN = headers("ml-vision", "admin", user="ops")
S = LeaseState
# what each request may answer, beside its success: 400 a time already past (the clock moves
# under the request) or a new end not after now, 403 quota, budget or waiting limit, 404 a lease
# the Blazar API no longer shows (cancelled), 409 a state, name, volume or offer that another
# request or the engine changed first
EXPECTED = {
    "create": {201, 400, 403, 409}, "offer": {201, 400, 403, 409}, "cancel": {204, 409},
    "change": {200, 400, 403, 409}, "rename": {200, 404, 409}, "done": {200, 409}, "show": {200},
}


@pytest.fixture
def config(db_url):
    # offers of another GPU model too; reclaims of borrowed GPUs within the test's hours
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       gpu_memory_gb={"A100": 80, "H100": 80}, reclaim_after_seconds=600,
                       reclaim_min_runtime_seconds=600, reclaim_notice_seconds=300,
                       max_waiting_leases_per_project=15, max_waiting_leases_per_user=6)


class Tenant:
    """One worker thread: OPS random requests as one user of whichever project it draws."""

    def __init__(self, index: int, app, clock, volumes: dict[str, list[str]], shared: list, lock: threading.Lock):
        self.name = f"w{index}"
        self.rng = random.Random(f"{SEED}:{self.name}")
        self.client, self.clock, self.volumes = app.test_client(), clock, volumes
        self.shared, self.lock = shared, lock        # every worker's leases: two may act on one
        self.own: list[tuple[str, str]] = []
        self.answers: Counter = Counter()
        self.unexpected: list[str] = []

    def headers(self, project: str) -> dict:
        return headers(project, user=f"{project}-{self.name}")

    def run(self) -> None:
        ops = [(self.create, 32), (self.cancel, 14), (self.change, 20), (self.rename, 6), (self.done, 10),
               (self.show, 6)]
        for step in range(OPS):
            op = self.rng.choices([f for f, _ in ops], [w for _, w in ops])[0]
            try:
                op(step)
            except Exception as exc:   # a request that raised out of the app: as bad as a 500
                self.unexpected.append(f"seed {SEED} {self.name} step {step} {op.__name__}: raised {exc!r}")

    def answer(self, step: int, kind: str, reply) -> dict:
        body = reply.get_json(silent=True) or {}
        code = (body.get("errors") or [{}])[0].get("code") if reply.status_code >= 400 else None
        self.answers[(kind, reply.status_code, code)] += 1
        if reply.status_code not in EXPECTED[kind]:
            self.unexpected.append(f"seed {SEED} {self.name} step {step} {kind}: {reply.status_code} "
                                   f"{reply.get_data(as_text=True)[:2000]}")
        return body

    def pick(self) -> tuple[str, str] | None:
        """One of this worker's last leases, or now and then of any worker's (the older are mostly over)."""
        if self.rng.random() < 0.3:
            with self.lock:
                pool = self.shared[-RECENT:]
        else:
            pool = self.own[-RECENT:]
        return pool[self.rng.randrange(len(pool))] if pool else None

    def create(self, step: int) -> None:
        rng, now = self.rng, self.clock.now()
        project = rng.choice(PROJECTS)
        body: dict = {"shape": rng.choice(SHAPES), "instances": rng.choice([1, 1, 1, 2, 3]),
                      "duration": rng.choice([600, 1800, 3600, 2 * 3600, 4 * 3600])}
        if rng.random() < 0.15:   # a reservation ahead, some with a latest start so that they expire
            body["start"] = rfc3339(now + rng.choice([300, 1800, 3600]))
        if rng.random() < 0.1:
            body["latest_start"] = rfc3339(now + rng.choice([3600, 4000]))
        if rng.random() < 0.15:
            body["name"] = rng.choice(NAMES)
        if rng.random() < 0.1:
            body["priority_class"] = "preemptible"
        volume = rng.random()
        if volume < 0.05 and self.volumes.get(project):
            body["volume"] = {"id": rng.choice(self.volumes[project])}
        elif volume < 0.15:
            body["volume"] = {"size_gb": 10}
        made = self.answer(step, "create", self.client.post("/v1/leases", json=body, headers=self.headers(project)))
        if "lease" not in made:
            return
        self.keep(project, made["lease"]["id"])
        if made.get("offers") and rng.random() < 0.2:   # taking one cancels the lease it replaces
            offer = rng.choice(made["offers"])
            taken = self.answer(step, "offer", self.client.post(
                "/v1/leases", json={**body, "accept_offer": offer["id"]}, headers=self.headers(project)))
            if "lease" in taken:
                self.keep(project, taken["lease"]["id"])

    def keep(self, project: str, lease_id: str) -> None:
        self.own.append((project, lease_id))
        with self.lock:
            self.shared.append((project, lease_id))

    def cancel(self, step: int) -> None:
        if (picked := self.pick()) is not None:
            project, lease_id = picked
            self.answer(step, "cancel", self.client.delete(f"/v1/leases/{lease_id}", headers=self.headers(project)))

    def change(self, step: int) -> None:
        if (picked := self.pick()) is None:
            return
        project, lease_id = picked
        if self.rng.random() < 0.7:
            body = {"duration": self.rng.choice([900, 1800, 3600, 3 * 3600, 6 * 3600]),
                    "shrink": self.rng.random() < 0.5}
        else:
            body = {"end": rfc3339(self.clock.now() + self.rng.choice([600, 3600, 5 * 3600])), "shrink": True}
        self.answer(step, "change", self.client.patch(f"/v1/leases/{lease_id}", json=body,
                                                      headers=self.headers(project)))

    def rename(self, step: int) -> None:
        if (picked := self.pick()) is not None:
            project, lease_id = picked
            self.answer(step, "rename", self.client.put(f"/reservation/v1/leases/{lease_id}",
                                                        json={"name": self.rng.choice(NAMES)},
                                                        headers=self.headers(project)))

    def done(self, step: int) -> None:
        if (picked := self.pick()) is not None:
            project, lease_id = picked
            self.answer(step, "done", self.client.post(f"/v1/leases/{lease_id}/done", headers=self.headers(project)))

    def show(self, step: int) -> None:
        if (picked := self.pick()) is not None:
            project, lease_id = picked
            self.answer(step, "show", self.client.get(f"/v1/leases/{lease_id}", headers=self.headers(project)))


def unfinished(sessions) -> list[tuple]:
    """The leases not finished yet, each with its state and last events."""
    with sessions() as s:
        rows = s.execute(select(m.Lease.id, m.Lease.status).where(m.Lease.status.not_in([st.value for st in FINAL])))
        return [(lease_id, status, [(e.at.isoformat(), e.kind, e.to_state, e.message)
                                    for e in s.scalars(select(m.Event).where(m.Event.lease_id == lease_id)
                                                       .order_by(m.Event.id.desc()).limit(3))])
                for lease_id, status in rows]


def snapshot_problems(snapshots: sessionmaker) -> list[str]:
    """Every broken promise in one consistent snapshot of the ledger."""
    with snapshots() as s:
        return overcommits_in(s) + quota_overruns_in(s) + holding_mismatches_in(s)


@pytest.fixture
def snapshots(db_url):
    """Sessions of their own connections, each one REPEATABLE READ transaction: one snapshot."""
    reader = create_engine(db_url, isolation_level="REPEATABLE READ")
    yield sessionmaker(reader)
    reader.dispose()


def test_tenants_and_the_engine_at_once_never_overcommit_a_host_or_pass_a_quota(
        app, runtime, sessions, cloud, engine_tick, snapshots, monkeypatch, caplog):
    caplog.set_level(logging.ERROR)
    client = app.test_client()
    assert client.put("/v1/quotas/small-lab", headers=ADMIN, json={"quota": {"gpu_models": {
        "A100": {"gpus": 4, "borrow_gpus": 2}, "H100": {"gpus": 2, "borrow_gpus": 2}}}}).status_code == 200
    assert client.post("/v1/budgets", headers=ADMIN, json={"budget": {
        "project_id": "small-lab", "gpu_model": "A100", "gpu_hours": 150, "period": "month"}}).status_code == 201
    volumes = {p: [cloud.add_volume(p, 20) for _ in range(2)] for p in ("ml-vision", "nlp-lab")}
    runtime.fits.min_waiting = 15   # long queues fit a create into the plan, short ones replan
    # the engine thread ticks on its own: a request's wake would have run_once tick again at once,
    # for as long as requests keep coming, and the clock would not move
    monkeypatch.setattr(runtime, "wake_engine", lambda can_wait=False: None)
    shared: list = []
    lock = threading.Lock()
    tenants = [Tenant(i, app, runtime.clock, volumes, shared, lock) for i in range(WORKERS)]
    stop_engine, stop_checker = threading.Event(), threading.Event()
    ticks, taken, broken, crashed = [0], [0], {}, []

    def engine() -> None:
        rng = random.Random(f"{SEED}:engine")
        try:
            while not stop_engine.is_set():
                engine_tick(advance=rng.choice([10, 30, 60, 300, 600, 1200]))   # only this thread moves the clock
                ticks[0] += 1
        except Exception as exc:
            crashed.append(f"seed {SEED} engine pass {ticks[0]}: raised {exc!r}")

    def checker() -> None:
        try:
            while not stop_checker.is_set():
                taken[0] += 1
                for problem in snapshot_problems(snapshots):   # each told once, with the first snapshot it was in
                    broken.setdefault(problem, taken[0])
                time.sleep(0.2)   # a snapshot is a few tens of ms of this process's one interpreter
        except Exception as exc:
            crashed.append(f"seed {SEED} snapshot {taken[0]}: raised {exc!r}")

    began = time.monotonic()
    workers = [threading.Thread(target=t.run, name=t.name) for t in tenants]
    others = [threading.Thread(target=engine), threading.Thread(target=checker)]
    for thread in workers + others:
        thread.start()
    for thread in workers:
        thread.join()
    stop_engine.set()
    stop_checker.set()
    for thread in others:
        thread.join()
    took = time.monotonic() - began
    answers = sum((t.answers for t in tenants), Counter())
    unexpected = crashed + [u for t in tenants for u in t.unexpected]
    ran = sum(answers.values())
    print(f"seed {SEED}: {ran} requests, {ticks[0]} engine passes, {taken[0]} snapshots in {took:.1f} s")
    for (kind, status, code), n in sorted(answers.items(), key=str):
        print(f"  {kind} {status} {code or ''}: {n}")
    assert not unexpected and not broken, (
        f"seed {SEED}: {len(unexpected)} unexpected answers, {len(broken)} broken promises:\n"
        + "\n".join(unexpected[:10] + [f"snapshot {n}: {problem}" for problem, n in list(broken.items())[:20]]))
    assert snapshot_problems(snapshots) == [], f"seed {SEED}"

    # not vacuous: much was asked, ran, was cut short and was checked while it happened
    with sessions() as s:
        reached = Counter(s.scalars(select(m.Event.to_state).where(m.Event.kind == "transition")))
        ended_early = s.scalar(select(func.count()).select_from(m.Event).where(
            m.Event.to_state == S.ENDING.value, m.Event.message == "ended early by the user"))
    print(f"seed {SEED}: states reached {dict(reached)}; {ended_early} running leases cancelled")
    assert ran >= WORKERS * OPS * 0.95 and answers[("create", 201, None)] >= 150, f"seed {SEED}: {answers}"
    assert answers[("change", 200, None)] >= 80 and answers[("done", 200, None)] >= 5 \
        and answers[("offer", 201, None)] >= 3, f"seed {SEED}: {answers}"
    assert reached[S.ACTIVE.value] >= 30 and reached[S.CANCELLED.value] >= 50 and reached[S.PREEMPTED.value] >= 1 \
        and ended_early >= 8, f"seed {SEED}: {reached}, {ended_early} ended early"
    assert ticks[0] >= 40 and taken[0] >= 100, f"seed {SEED}: {ticks[0]} passes, {taken[0]} snapshots"

    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], f"seed {SEED}: errors logged: {errors[:10]}"

    # the rest of the day: every lease finishes, nothing of them is left in the cloud, no boot was refused
    for _ in range(300):
        left = unfinished(sessions)
        if not left:
            break
        engine_tick(advance=1800)
    assert not left, f"seed {SEED}: {len(left)} leases never finished: {left[:5]}"
    assert snapshot_problems(snapshots) == [], f"seed {SEED}"
    assert_consistent(sessions, cloud, [lease_id for _, lease_id in shared])
    with sessions() as s:
        refused = [(f.lease_id, f.message) for f in s.scalars(select(m.LeaseFailure))]
    assert refused == [], f"seed {SEED}: boots the cloud refused: {refused[:10]}"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], f"seed {SEED}: errors logged: {errors[:10]}"

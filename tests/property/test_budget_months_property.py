"""A monthly GPU-hour budget across a month's end (engine/budgets.py, docs/design.md "Budgets"):
the real service (API through the Flask test client, the engine through run_once, the simulated
cloud, a virtual clock from 18 hours before a month ends) driven through seeded random steps:
creates (some starting in the next month), extensions, cancels, parks (a long park grace, so a
park carries hours into the next month), early resumes, hosts going down and back, engine passes,
and the operator changing a budget.

The promise checked after every step, in the budget's own figures (used + planned, per month):
- a tenant's step (create, PATCH, resume, cancel) never takes a month's hours past its budget,
  nor adds hours to a month already past it (the operator lowered the budget, or the engine
  carried hours there);
- an engine step (a pass, a park, a host down or back) only moves hours the tenant committed:
  the project's hours over all months do not grow (beyond the minute a re-placed or parked lease
  with less left is given), though a month they move into may pass its budget;
- the operator's change of a budget may leave a month past it: what was committed stays.

The workload keeps the GPUs asked at most 16 of the 32 A100s, so that every lease is planned at
its asked start even with a host down: a month's hours move only by the steps above, never by
queueing behind other leases (which is the engine's too, and not what this test is about)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.demo.seed import seed as seed_demo
from gpu_tenancy.domain import budget
from gpu_tenancy.engine import budgets, park
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import empty_database, headers
from tests.property.edges_driver import seeded_ids

pytestmark = pytest.mark.long   # a minute or more: run first (tests/conftest.py)

START = int(datetime(2027, 1, 31, 6, tzinfo=timezone.utc).timestamp())   # 18 h before February
MONTHS = [budget.month_of(START)]
for _ in range(3):
    MONTHS.append(budget.month_of(MONTHS[-1][1]))
PROJECTS = ("ml-vision", "nlp-lab")
MODEL = "A100"
SHAPES = (("a100.x1", 1), ("a100.x2", 2), ("a100.x4", 4))
HOURS = 3600
LIVE_GPUS = 16          # of 32: with one host of 8 down, every lease still fits at its asked start
SEEDS = (1, 2, 3, 4, 5, 6, 7, 8)
STEPS = 90
OPS = {"create": 30, "extend": 12, "cancel": 4, "park": 10, "resume": 14, "host": 5, "advance": 22, "budget": 3}
TENANT = ("create", "extend", "cancel", "resume")
EPS = 1e-6
MINUTE_GIVEN = 60       # retry.MIN_REMAINING, park.MIN_REMAINING: a lease with less left still gets a minute


@dataclass
class Run:
    seed: int
    log: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    done: dict[str, int] = field(default_factory=dict)   # op -> steps taken that did something

    def fail(self, step: int, text: str) -> None:
        self.broken.append(f"seed {self.seed} step {step}: {text}\n  steps before:\n    "
                           + "\n    ".join(self.log[-12:]))


class World:
    def __init__(self, db_url: str, seed: int):
        self.rng = random.Random(seed)
        self.clock = VirtualClock(START)
        self.cloud = SimulatedCloud.from_file(DEMO_CLOUD, self.clock)
        grace = self.rng.choice((4, 8, 12)) * HOURS   # a park carries hours this far later
        config = Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True, park_grace_seconds=grace)
        self.app = create_app(config, clock=self.clock, cloud=self.cloud, start_engine=False)
        self.rt = self.app.extensions["gpu_tenancy"]
        with session_scope(self.rt.sessions) as session:
            seed_demo(session, self.clock.now(), self.cloud.images())
            for project in PROJECTS:   # room for every lease the workload asks: only the budget refuses
                quota = session.get_one(m.Quota, (project, MODEL))
                quota.gpus, quota.borrow_gpus, quota.max_duration = 32, 0, None
        self.rt.engine.lifecycle.refresh_hosts()
        self.client = self.app.test_client()
        self.budget_ids: dict[str, str] = {}
        for project in PROJECTS:
            self.set_budget(project, self.rng.choice((24, 40, 64, 96, 128)))
        self.down: str | None = None

    def close(self) -> None:
        self.rt.sessions.kw["bind"].dispose()

    # --- what the service holds -------------------------------------------------------------------
    def figures(self) -> dict[str, dict[tuple[int, int], tuple[float, float]]]:
        """project -> month -> (hours committed, its budget's GPU-hours), in the budget's own figures."""
        now = self.clock.now()
        out: dict[str, dict[tuple[int, int], tuple[float, float]]] = {}
        with session_scope(self.rt.sessions) as session:
            for project in PROJECTS:
                rows = [r for r in budgets.listing(session, project) if r.gpu_model == MODEL]
                limit = min((r.gpu_hours for r in rows), default=float("inf"))
                stub = budget.Budget("-", project, MODEL, limit, budget.MONTH)
                out[project] = {}
                for period in MONTHS:
                    use = budget.use(stub, period, budgets.spans(session, project, MODEL, *period, now), now)
                    out[project][period] = (use.used + use.planned, limit)
        return out

    def leases(self, *statuses: str) -> list[m.Lease]:
        with session_scope(self.rt.sessions) as session:
            rows = list(session.scalars(select(m.Lease).where(m.Lease.status.in_(statuses)).order_by(m.Lease.id)))
            session.expunge_all()
        return rows

    def live_gpus(self) -> int:
        unfinished = ("requested", "queued", "scheduled", "provisioning", "active", "ending", "parking", "parked",
                      "resuming")
        return sum(r.gpus_per_vm * r.instances for r in self.leases(*unfinished))

    # --- steps --------------------------------------------------------------------------------------
    def tick(self, seconds: int) -> None:
        """The clock on by `seconds`, the engine run every 5 minutes of it at most (and at its end)."""
        while seconds > 0:
            step = min(seconds, 300)
            self.clock.advance(step)
            seconds -= step
            self.rt.engine.run_once()

    def set_budget(self, project: str, gpu_hours: float) -> None:
        admin = headers(project, "admin", user="ops")
        if project in self.budget_ids:
            gone = self.client.delete(f"/v1/budgets/{self.budget_ids[project]}", headers=admin)
            assert gone.status_code == 204, gone.get_json()
        made = self.client.post("/v1/budgets", headers=admin, json={"budget": {
            "project_id": project, "gpu_model": MODEL, "gpu_hours": gpu_hours, "period": "month"}})
        assert made.status_code == 201, made.get_json()
        self.budget_ids[project] = made.get_json()["budget"]["id"]

    def step(self, op: str) -> tuple[str, int | None, dict | None]:
        """Take one step of kind `op`: what was done, in words; the API's status and answer, if asked."""
        rng, now = self.rng, self.clock.now()
        if op == "create":
            project = rng.choice(PROJECTS)
            shape, gpus = rng.choice(SHAPES)
            if self.live_gpus() + gpus > LIVE_GPUS:
                return "create: skipped (the workload's GPUs are all asked)", None, None
            body = {"shape": shape, "duration": f"PT{rng.choice((1, 2, 4, 6, 10, 16))}H"}
            if rng.random() < 0.5:
                body["start"] = rfc3339(now + rng.randrange(10, 30 * 60) * 60)
            reply = self.client.post("/v1/leases", json=body, headers=headers(project))
            return f"create {project} {body}", reply.status_code, reply.get_json()
        if op in ("extend", "cancel"):
            rows = self.leases("queued", "scheduled", "provisioning", "active")
            if not rows:
                return f"{op}: skipped (no lease)", None, None
            row = rng.choice(rows)
            url = f"/v1/leases/{row.id}"
            if op == "cancel":
                reply = self.client.delete(url, headers=headers(row.project_id))
                return f"cancel {row.id[:8]} ({row.status})", reply.status_code, None
            body = {"duration": f"PT{row.duration // 60 + rng.choice((60, 120, 240, 480, 720))}M"}
            reply = self.client.patch(url, json=body, headers=headers(row.project_id))
            return f"extend {row.id[:8]} ({row.status}) {body}", reply.status_code, reply.get_json()
        if op == "park":
            rows = [r for r in self.leases("active") if park.can_park(r)]
            if not rows:
                return "park: skipped (none active)", None, None
            row = rng.choice(rows)
            park.begin(self.rt.engine.lifecycle, row.id, "idle (the test's)")
            self.tick(10)
            self.tick(10)   # the simulated cloud offloads delete_seconds after the shelve
            return f"park {row.id[:8]}", None, None
        if op == "resume":
            rows = self.leases("parked")
            if not rows:
                return "resume: skipped (none parked)", None, None
            row = rng.choice(rows)
            reply = self.client.post(f"/v1/leases/{row.id}/resume", headers=headers(row.project_id))
            return f"resume {row.id[:8]} (held from {rfc3339(int(row.resume_by.replace(tzinfo=timezone.utc).timestamp()))})", \
                reply.status_code, reply.get_json()
        if op == "host":
            if self.down is None:
                self.down = rng.choice([f"gpu-a100-{i}" for i in range(1, 5)])
                self.cloud.set_host_state(self.down, up=False)
                what = f"host {self.down} down"
            else:
                self.cloud.set_host_state(self.down, up=True)
                what, self.down = f"host {self.down} up", None
            self.tick(self.rt.config.host_refresh_seconds)
            return what, None, None
        if op == "advance":
            seconds = rng.choice((300, 900, 1800, 3600, 3 * HOURS))
            self.tick(seconds)
            return f"advance {seconds} s", None, None
        assert op == "budget"
        project = rng.choice(PROJECTS)
        hours = rng.choice((16, 24, 40, 64, 96, 128))
        self.set_budget(project, hours)
        return f"budget {project} {hours} GPU-hours a month", None, None


ACCEPTED = {"create": {201, 403}, "extend": {200, 400, 403, 409}, "cancel": {204, 409}, "resume": {200, 403, 409}}


def check(run: Run, step: int, op: str, before, after, refused: bool, grew_by: float) -> None:
    for project in PROJECTS:
        for period in MONTHS:
            was, _ = before[project][period]
            now, limit = after[project][period]
            month = budget.describe(period)
            if op in TENANT and now > max(limit, was) + EPS:
                run.fail(step, f"{op} took {project}'s {month} to {now:.3f} GPU-hours (budget {limit}, "
                               f"{was:.3f} before the step)")
        if op in TENANT and refused:
            changed = [p for p in MONTHS if abs(after[project][p][0] - before[project][p][0]) > EPS]
            if changed:
                run.fail(step, f"{op} was refused but changed {project}'s hours in "
                               + ", ".join(budget.describe(p) for p in changed))
        if op in ("park", "host", "advance"):
            total_before = sum(h for h, _ in before[project].values())
            total_after = sum(h for h, _ in after[project].values())
            if total_after > total_before + grew_by + EPS:
                run.fail(step, f"the engine's {op} grew {project}'s hours from {total_before:.3f} "
                               f"to {total_after:.3f}")


def drive(db_url: str, seed: int) -> Run:
    with seeded_ids(seed):   # lease ids (and so every order that ties on them) the same on every replay
        return _drive(db_url, seed)


def _drive(db_url: str, seed: int) -> Run:
    world, run = World(db_url, seed), Run(seed)
    try:
        ops, weights = zip(*OPS.items())
        for step in range(1, STEPS + 1):
            op = world.rng.choices(ops, weights)[0]
            before = world.figures()
            # a minute given to each lease an engine step re-places or parks with less than that left
            grew_by = sum(r.gpus_per_vm * r.instances for r in world.leases(
                "scheduled", "provisioning", "active", "parking", "resuming")) * MINUTE_GIVEN / HOURS
            what, status, answer = world.step(op)
            run.log.append(f"{step} {rfc3339(world.clock.now())} {what} -> {status}")
            if status is not None:
                run.done[op] = run.done.get(op, 0) + 1
                if status not in ACCEPTED[op]:
                    run.fail(step, f"{what}: answered {status} {answer}")
                elif status == 403 and (answer or {}).get("errors", [{}])[0].get("code") != "gpu_tenancy.over_budget":
                    run.fail(step, f"{what}: a 403 that is not the budget's: {answer}")
            check(run, step, op, before, world.figures(), status is not None and status >= 400, grew_by)
    finally:
        world.close()
    return run


@pytest.mark.parametrize("seed", SEEDS)
def test_no_tenant_step_takes_a_month_past_its_budget(migrated, tmp_path, seed):
    run = drive(empty_database(migrated, tmp_path, f"budget{seed}"), seed)
    assert run.done.get("create", 0) >= 10 and run.done.get("resume", 0) >= 1, run.done   # the workload ran
    assert not run.broken, "\n\n".join(run.broken[:3])

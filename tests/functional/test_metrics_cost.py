"""/metrics' GPU-hour counters cost a scrape the same whatever the length of history: the
engine folds closed hours into running totals (engine/metric_rollups.py), and a scrape
reads those and the last hours. And the totals are the same figures as a sum over all of
history."""
from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from sqlalchemy import delete, event, update

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.engine import housekeeping, metric_rollups
from gpu_tenancy.engine.usage import gpu_hours
from tests.conftest import PG_URL, headers

ADMIN = headers("ml-vision", "admin", "root")
DAY = 86400
HISTORY_TABLES = ("allocations", "spent_allocations", "gpu_use_hours")


def add_history(sessions, leases: int, seed: int, before: int) -> None:
    """`leases` ended leases, each with one allocation and its agents' hourly reports, over the
    days before `before` (one lease of ml-vision ends after it: one current as history is folded)."""
    rng = random.Random(seed)
    with session_scope(sessions) as session:
        for k in range(leases):
            end = before - rng.randrange(0, 40 * DAY) if k else before + 3600
            hours = rng.randrange(1, 12)
            start = end - hours * 3600
            project = rng.choice(["ml-vision", "nlp-lab"])
            lease_id = f"{seed:04d}0000-0000-4000-8000-{k:012d}"
            session.add(m.Lease(id=lease_id, name=f"h{k}", project_id=project, user_id="u", status="ended",
                                shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=1, duration=hours * 3600,
                                earliest_start=utcnow_naive(start), start_at=utcnow_naive(start),
                                end_at=utcnow_naive(end), queue_reasons=[], created_at=utcnow_naive(start),
                                updated_at=utcnow_naive(end)))
            session.flush()   # the lease before the rows that name it
            session.add(m.Allocation(lease_id=lease_id, project_id=project, vm_index=0, host="gpu-a100-01",
                                     gpu_model="A100", gpus=1, start_at=utcnow_naive(start), end_at=utcnow_naive(end)))
            for h in range(hours):
                session.add(m.GpuUseHour(lease_id=lease_id, hour=utcnow_naive(start // 3600 * 3600 + h * 3600),
                                         project_id=project, gpu_model="A100", measured_gpu_seconds=3600.0,
                                         used_gpu_seconds=rng.uniform(0, 3600)))


@pytest.fixture
def work(runtime):
    """Statements sent, and (SQLite) the database's work per statement on the history tables,
    in its virtual machine's steps: what grows with the rows a statement reads."""
    engine = runtime.sessions.kw["bind"]
    steps: Counter = Counter()
    sent: list[str] = []

    def before(conn, cursor, statement, *args):
        sent.append(statement)
        touches = any(re.search(rf"\b{t}\b", statement) for t in HISTORY_TABLES)
        if not PG_URL:
            def tick():
                steps[touches] += 1
                return 0
            conn.connection.dbapi_connection.set_progress_handler(tick, 10)
    event.listen(engine, "before_cursor_execute", before)
    yield sent, steps
    event.remove(engine, "before_cursor_execute", before)


def scrape(client) -> tuple[dict[tuple[str, str], float], str]:
    reply = client.get("/metrics", headers=ADMIN)
    assert reply.status_code == 200
    text = reply.get_data(as_text=True)
    found = re.findall(r'gpu_tenancy_gpu_hours_allocated_total\{gpu_model="(\w+)",project_id="([\w-]+)"\} ([\d.e+]+)',
                       text)
    return {(project, model): float(v) for model, project, v in found}, text


def test_a_scrape_reads_no_more_with_ten_times_the_history(client, runtime, clock, work):
    sent, steps = work
    now = clock.now()
    costs = []
    for leases, seed in ((30, 1), (270, 2)):          # 30 leases, then 300
        add_history(runtime.sessions, leases, seed, before=now)
        with session_scope(runtime.sessions) as session:     # fold everything again, from nothing
            session.execute(delete(m.MetricRollup).where(m.MetricRollup.name != metric_rollups.WATERMARK))
            session.execute(update(m.MetricRollup).values(value=0.0))
        housekeeping.run(runtime.sessions, now, runtime.config)
        with session_scope(runtime.sessions) as session:
            assert metric_rollups.through(session) == (now - metric_rollups.LAG) // 3600 * 3600
            everything = gpu_hours(session, 0, now, now)
        sent.clear()
        steps.clear()
        shown, _ = scrape(client)
        # the same figures as the sum over all of history, the current lease's hours counted as they run
        assert shown == {(p, model): hours for p, models in everything.items() for model, hours in models.items()}
        costs.append((len(sent), steps[True]))
    (few_statements, few_steps), (many_statements, many_steps) = costs
    assert many_statements == few_statements
    if not PG_URL:
        assert many_steps <= few_steps * 1.5 + 50, costs


def test_the_counters_never_go_down_as_hours_are_folded_and_the_measured_ones_count_every_report(
        client, runtime, clock):
    now = clock.now()
    add_history(runtime.sessions, 20, 3, before=now + 6 * 3600)
    before, text = scrape(client)
    measured = float(re.search(r'gpu_tenancy_gpu_hours_measured_total\{gpu_model="A100",project_id="ml-vision"\} '
                               r'([\d.e+]+)', text).group(1))
    with session_scope(runtime.sessions) as session:
        hours = session.query(m.GpuUseHour).filter(m.GpuUseHour.project_id == "ml-vision").count()
    assert measured == hours
    for step in range(1, 12):     # the engine's housekeeping, hour after hour
        clock.advance(3600)
        housekeeping.run(runtime.sessions, clock.now(), runtime.config)
        housekeeping.run(runtime.sessions, clock.now(), runtime.config)   # twice: folded once
        after, _ = scrape(client)
        assert all(after[key] >= before[key] for key in before), (step, before, after)
        before = after
    with session_scope(runtime.sessions) as session:
        assert metric_rollups.through(session) > now
        everything = gpu_hours(session, 0, clock.now(), clock.now())
    assert after == {(p, model): hours for p, models in everything.items() for model, hours in models.items()}

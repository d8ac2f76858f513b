"""/metrics' all-time GPU-hour counters (allocated, measured, used, per project and GPU
model) as running totals, so that a scrape costs the same whatever the length of history.

The engine's housekeeping folds each closed stretch of time, [watermark, an hour boundary
LAG ago), into the totals once, and moves the watermark (a conditional update: two
processes cannot fold the same stretch twice). A scrape reads the totals and adds what
lies after the watermark: the allocations and GPU-use hours of the last hours only. The
lag leaves late agent reports and transactions still open time to land before their
stretch is closed. Rows folded in may then be pruned (engine/housekeeping.py) without a
counter going down.

What lies after the watermark is read from the ledger as it is now, and the ledger can take
time back: a lease whose boot fails and is retried elsewhere gives back the time it was
provisioning (a failed boot is not billed: engine/host_failure.py), a resuming lease moved off a
host too. A counter never goes down (Prometheus reads a decrease as a restart, and rate() counts
the whole counter as the increase), so the highest figure each has shown is kept beside the
totals (`shown`), and a counter whose count fell holds still until the count passes it again."""
from __future__ import annotations

from collections import defaultdict
from typing import cast

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.calendar import overlap
from gpu_tenancy.domain.states import LeaseState as S
from gpu_tenancy.engine.usage import USED_GPUS

ALLOCATED, MEASURED, USED = "gpu_seconds_allocated", "gpu_seconds_measured", "gpu_seconds_used"
NAMES = (ALLOCATED, MEASURED, USED)
WATERMARK = "through"
SHOWN = "shown "   # before a counter's name: the row of the highest figure /metrics showed of it
LAG = 2 * 3600

Totals = dict[str, dict[tuple[str, str], float]]   # name -> (project, gpu model) -> GPU-seconds


def through(session: Session) -> int:
    row = session.get(m.MetricRollup, (WATERMARK, "", ""))
    return 0 if row is None else int(row.value)   # none (the migration made one): nothing folded yet


def totals(session: Session, now: int) -> Totals:
    """Every counter as of now: the folded totals and what came after the watermark."""
    out: Totals = {name: defaultdict(float) for name in NAMES}
    for row in session.scalars(select(m.MetricRollup).where(m.MetricRollup.name.in_(NAMES))):
        out[row.name][(row.project_id, row.gpu_model)] += row.value
    for name, figures in between(session, through(session), now, closed=False).items():
        for key, seconds in figures.items():
            out[name][key] += seconds
    return out


def shown(session: Session, counted: Totals) -> Totals:
    """The figures /metrics shows: each the higher of its count and the highest shown before
    (a series counted no more keeps its highest too), the higher ones kept for the next scrape.
    A scrape that raced another to keep a series' first figure leaves it to the next scrape."""
    rollup = cast(Table, m.MetricRollup.__table__)
    out: Totals = {name: defaultdict(float) for name in NAMES}
    highest = {(row.name[len(SHOWN):], row.project_id, row.gpu_model): row.value for row in session.scalars(
        select(m.MetricRollup).where(m.MetricRollup.name.in_([SHOWN + name for name in NAMES])))}
    for (name, project, model), value in highest.items():
        out[name][(project, model)] = value
    rises: list[dict] = []
    firsts: list[dict] = []
    for name, figures in sorted(counted.items()):   # in key order: two scrapes lock rows in one order
        for (project, model), value in sorted(figures.items()):
            before = highest.get((name, project, model))
            if before is None or value > before:
                out[name][(project, model)] = value
                (firsts if before is None else rises).append(
                    {"name_": SHOWN + name, "project_": project, "model_": model, "value_": value})
    if rises:   # never lowered, whatever another scrape kept meanwhile
        session.connection().execute(update(rollup).where(
            rollup.c.name == bindparam("name_"), rollup.c.project_id == bindparam("project_"),
            rollup.c.gpu_model == bindparam("model_"), rollup.c.value < bindparam("value_"))
            .values(value=bindparam("value_")), rises)
    if firsts:
        try:
            with session.begin_nested():
                session.connection().execute(insert(rollup).values(
                    name=bindparam("name_"), project_id=bindparam("project_"), gpu_model=bindparam("model_"),
                    value=bindparam("value_")), firsts)
        except IntegrityError:   # another scrape kept them first
            pass
    return out


def between(session: Session, start: int, end: int, closed: bool = True) -> Totals:
    """GPU-seconds allocated over [start, end), and measured and used in the hours from start's
    to end's (`closed`), or every hour from start's (not: the hour now is counted as it runs)."""
    out: Totals = {name: defaultdict(float) for name in NAMES}
    if end > start:
        for project, model, gpus, begins, ends in allocated(session, start, end):
            out[ALLOCATED][(project, model)] += gpus * overlap(to_epoch(begins), to_epoch(ends), start, end)
    hours = [m.GpuUseHour.hour >= utcnow_naive(start)] + ([m.GpuUseHour.hour < utcnow_naive(end)] if closed else [])
    rows = session.execute(select(m.GpuUseHour.project_id, m.GpuUseHour.gpu_model,
                                  func.sum(m.GpuUseHour.measured_gpu_seconds), func.sum(m.GpuUseHour.used_gpu_seconds))
                           .where(*hours).group_by(m.GpuUseHour.project_id, m.GpuUseHour.gpu_model))
    for project, model, measured, used in rows:
        out[MEASURED][(project, model)] += float(measured or 0)
        out[USED][(project, model)] += float(used or 0)
    return out


def allocated(session: Session, start: int, end: int) -> list[tuple]:
    """engine/usage.py's used_between, read by the allocations' times: the leases' states are
    checked as "not one that never used GPUs", which no index answers, so the database goes
    by the index on end_at (`status IN (...)` would have it walk every ended lease)."""
    never = [s.value for s in S if s not in USED_GPUS]
    a, spent = m.Allocation, m.SpentAllocation
    ledger = session.execute(select(a.project_id, a.gpu_model, a.gpus, a.start_at, a.end_at).join(m.Lease).where(
        a.end_at > utcnow_naive(start), a.start_at < utcnow_naive(end), m.Lease.status.not_in(never)))
    kept = session.execute(select(spent.project_id, spent.gpu_model, spent.gpus, spent.start_at, spent.end_at).where(
        spent.end_at > utcnow_naive(start), spent.start_at < utcnow_naive(end)))
    return [tuple(row) for row in ledger] + [tuple(row) for row in kept]


def advance(session: Session, now: int) -> int:
    """Fold [watermark, the hour boundary LAG before now) into the totals (in the caller's
    transaction); returns the watermark after. Nothing when another process moved it first."""
    old = through(session)
    new = (now - LAG) // 3600 * 3600
    if new <= old:
        return old
    if session.get(m.MetricRollup, (WATERMARK, "", "")) is None:
        session.add(m.MetricRollup(name=WATERMARK, project_id="", gpu_model="", value=float(new)))
        session.flush()   # a second process adding it too fails on the key: only one folds
    else:
        moved = session.execute(update(m.MetricRollup).where(
            m.MetricRollup.name == WATERMARK, m.MetricRollup.value == float(old)).values(value=float(new)))
        if moved.rowcount != 1:   # type: ignore[attr-defined]
            return through(session)
    for name, figures in between(session, old, new).items():
        for (project, model), seconds in figures.items():
            row = session.get(m.MetricRollup, (name, project, model))
            if row is None:
                session.add(m.MetricRollup(name=name, project_id=project, gpu_model=model, value=seconds))
            else:
                row.value += seconds
    return new

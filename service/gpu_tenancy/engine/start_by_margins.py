"""Each project's start-by margin ratio (domain/start_by.py), computed by the engine once a
minute and kept in start_by_margins, where a create (engine/ask_facts.py) and a replan
(engine/ledger.py) read it to tell a waiting lease its start-by beside its ETA.

The samples are the model's. A lease told an ETA keeps when it was told (eta_told_at) until
its first start; then the ledger records its lateness ratio as a start_by_samples row
(`record_start`: its wait counted from the tell, or from its asked start if later) and clears
eta_told_at, so a lease queued again after it ran is neither sampled twice nor overdue by an ETA
long past. The overdue are the waiting leases past the ETA they were told, at how late they are so
far. Each refresh keeps only each project's last WINDOW samples and each load class's last
CLASS_WINDOW (and none older than HORIZON), so what it reads is bounded by the projects and
classes, not by how many leases start: one tenant starting many short leases makes it no
slower for the others.

Each sample also keeps its project's load class when the lease started (the ledger's holds then:
domain/start_by.py, load_class), and each refresh raises a project's ratio to its class's
(with_load: the last CLASS_WINDOW samples of the class it is in now, everyone's), so that a
project whose load has just turned is not told the margin of its quieter past."""
from __future__ import annotations

from collections import defaultdict

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.start_by import (CLASS_WINDOW, FROM_EVERYONE, WINDOW, MarginBasis, lateness_ratio,
                                        load_classes, margin_basis, waits_from)
from gpu_tenancy.domain.states import HOLDING, WAITING

EVERY = 60             # seconds between two computations (the engine's tick: engine/lifecycle.py)
HORIZON = 30 * 86400   # samples older than this do not count
EVERYONE = ""          # the row of everyone's ratio
L, SAMPLE = m.Lease, m.StartBySample


def record_start(session: Session, row: m.Lease, start: int, load: int | None = None) -> None:
    """`row` given its GPUs from `start`: if it is its first start since it was told an ETA, and it
    waited, its lateness ratio is a sample, in its project's load class then (`load`; None: not
    known); either way the tell is settled."""
    if row.eta_told_at is None or row.first_eta is None:
        return
    told = waits_from(to_epoch(row.eta_told_at), to_epoch(row.earliest_start))
    if start > told:   # one that starts as told waits for nothing
        session.add(SAMPLE(lease_id=row.id, project_id=row.project_id, started_at=utcnow_naive(start),
                           ratio=lateness_ratio(told, to_epoch(row.first_eta), start), load_class=load))
    row.eta_told_at = None


def prune(session: Session, now: int) -> None:
    """Only each project's last WINDOW samples, and each load class's last CLASS_WINDOW, of the
    last HORIZON, are kept (what the model reads: domain/start_by.py, StartBy)."""
    session.execute(delete(SAMPLE).where(SAMPLE.started_at <= utcnow_naive(now - HORIZON)))
    latest = (SAMPLE.started_at.desc(), SAMPLE.lease_id.desc())
    in_project = func.row_number().over(partition_by=SAMPLE.project_id, order_by=latest)
    in_class = func.row_number().over(partition_by=SAMPLE.load_class, order_by=latest)
    ranked = select(SAMPLE.lease_id, SAMPLE.load_class, in_project.label("in_project"),
                    in_class.label("in_class")).subquery()
    session.execute(delete(SAMPLE).where(SAMPLE.lease_id.in_(
        select(ranked.c.lease_id).where(ranked.c.in_project > WINDOW,
                                        ranked.c.load_class.is_(None) | (ranked.c.in_class > CLASS_WINDOW))))
        .execution_options(synchronize_session=False))


def samples(session: Session, now: int) -> tuple[dict[str, list[tuple[int, str, float]]], dict[str, list[float]],
                                                dict[int, list[float]]]:
    """Per project: its samples (start, lease, ratio), latest first; the ratios so far of the
    WINDOW of its waiting leases whose told ETA passed last; and per load class the ratios of its
    last CLASS_WINDOW samples, everyone's."""
    started: dict[str, list[tuple[int, str, float]]] = defaultdict(list)
    classed: list[tuple[int, str, int, float]] = []
    for row in session.execute(select(SAMPLE.project_id, SAMPLE.started_at, SAMPLE.lease_id, SAMPLE.ratio,
                                      SAMPLE.load_class)
                             .order_by(SAMPLE.project_id, SAMPLE.started_at.desc(), SAMPLE.lease_id.desc())):
        started[row.project_id].append((to_epoch(row.started_at), row.lease_id, row.ratio))
        if row.load_class is not None:
            classed.append((to_epoch(row.started_at), row.lease_id, row.load_class, row.ratio))
    by_class: dict[int, list[float]] = defaultdict(list)
    for _start, _lease, load, ratio in sorted(classed, reverse=True):
        if len(by_class[load]) < CLASS_WINDOW:
            by_class[load].append(ratio)
    late: dict[str, list[tuple[int, str, float]]] = defaultdict(list)
    for r in session.execute(select(L.id, L.project_id, L.eta_told_at, L.earliest_start, L.first_eta).where(
            L.status.in_([s.value for s in WAITING]), L.eta_told_at.is_not(None), L.first_eta < utcnow_naive(now))):
        eta = to_epoch(r.first_eta)
        told = waits_from(to_epoch(r.eta_told_at), to_epoch(r.earliest_start))
        late[r.project_id].append((eta, r.id, lateness_ratio(told, eta, now)))
    overdue = {project: [ratio for _eta, _id, ratio in sorted(rows)[-WINDOW:]] for project, rows in late.items()}
    return dict(started), overdue, dict(by_class)


def loads_now(session: Session, now: int) -> dict[str, int]:
    """Each project's load class now (domain/start_by.py: load_classes): the GPUs its leases
    hold (allocations begun, of leases that hold GPUs), against its weight's share of the GPUs of
    each model on the hosts that take leases (enabled, up, not drained)."""
    a = m.Allocation
    held = {(project, model): float(gpus) for project, model, gpus in session.execute(
        select(a.project_id, a.gpu_model, func.sum(a.gpus)).join(L, L.id == a.lease_id)
        .where(L.status.in_([s.value for s in HOLDING]), a.start_at <= utcnow_naive(now))
        .group_by(a.project_id, a.gpu_model))}
    weights = {(q.project_id, q.gpu_model): q.weight for q in session.execute(
        select(m.Quota.project_id, m.Quota.gpu_model, m.Quota.weight))}
    # the hosts that take leases, as ledger.host_from_row reads them (the ledger imports this module)
    takes_leases = (m.Host.enabled.is_(True), m.Host.up.is_(True), m.Host.drained.is_(False))
    capacity = {model: float(gpus) for model, gpus in session.execute(
        select(m.Host.gpu_model, func.sum(m.Host.gpus)).where(*takes_leases).group_by(m.Host.gpu_model))}
    return load_classes(held, weights, capacity)


def compute(started: dict[str, list[tuple[int, str, float]]], overdue: dict[str, list[float]],
            by_class: dict[int, list[float]] | None = None, loads: dict[str, int] | None = None
            ) -> dict[str, MarginBasis]:
    """Each project's ratio with what it was learnt from, and everyone's under EVERYONE; a
    project's ratio raised to its load class's (`loads`: its class now, 0 without one;
    `by_class`: each class's ratios)."""
    by_class, loads = by_class or {}, loads or {}
    latest = sorted((sample for rows in started.values() for sample in rows[:WINDOW]), reverse=True)[:WINDOW]
    everyone = [ratio for _start, _lease, ratio in latest]
    bases = {EVERYONE: margin_basis((), (), everyone)}
    for project in started.keys() | overdue.keys() | {p for p, load in loads.items() if load in by_class}:
        own = [ratio for _start, _lease, ratio in started.get(project, [])[:WINDOW]]
        load = loads.get(project, 0)
        bases[project] = margin_basis(own, overdue.get(project, []), everyone, by_class.get(load, ()), load)
    return bases


def refresh(session: Session, now: int) -> dict[str, MarginBasis]:
    """Compute every project's ratio and keep them (the caller commits); returns them."""
    prune(session, now)
    bases = compute(*samples(session, now), loads_now(session, now))
    session.execute(delete(m.StartByMargin))
    session.add_all(m.StartByMargin(project_id=project, ratio=b.ratio, samples=b.samples, source=b.source,
                                    load_class=b.load_class, computed_at=utcnow_naive(now))
                    for project, b in bases.items())
    return bases


def read(session: Session) -> dict[str, MarginBasis]:
    """The margins kept: project -> its ratio and what it was learnt from (everyone's under
    EVERYONE; source "" in a row computed before the source was kept)."""
    return {r.project_id: MarginBasis(r.ratio, r.source or "", r.samples, r.load_class)
            for r in session.execute(select(m.StartByMargin.project_id, m.StartByMargin.ratio, m.StartByMargin.source,
                                            m.StartByMargin.samples, m.StartByMargin.load_class))}


NONE_YET = MarginBasis(0.0, FROM_EVERYONE, 0)   # nothing kept yet: the start-by is the ETA


def basis_of(bases: dict[str, MarginBasis], project_id: str) -> MarginBasis:
    """A project's margin, else everyone's, else NONE_YET."""
    return bases.get(project_id) or bases.get(EVERYONE) or NONE_YET


def basis_now(session: Session, project_id: str) -> MarginBasis:
    """A project's margin as kept now (one read; a create has it from its facts already)."""
    return basis_of(read(session), project_id)

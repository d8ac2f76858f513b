"""GPU-hour budgets: what admins set, and the check a lease passes when it is
asked for, extended or resumed early (domain/budget.py does the arithmetic; what a budget
promises, and what the engine's own moves do to it: docs/design.md, "Budgets")."""
from __future__ import annotations

import math
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain import budget
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine.capacity import holds_between
from gpu_tenancy.engine.quotas import known_gpu_models
from gpu_tenancy.engine.usage import used_between
from gpu_tenancy.errors import BadRequest, Forbidden, NotFound

S = LeaseState
PARKED = frozenset({S.PARKED})   # a parked lease's allocations are its held resume slot


def domain_budget(row: m.Budget) -> budget.Budget:
    return budget.Budget(row.id, row.project_id, row.gpu_model, row.gpu_hours, row.period,
                         to_epoch(row.start_at), to_epoch(row.end_at))


def listing(session: Session, project_id: str | None = None) -> list[m.Budget]:
    q = select(m.Budget).order_by(m.Budget.project_id, m.Budget.gpu_model, m.Budget.created_at, m.Budget.id)
    if project_id is not None:
        q = q.where(m.Budget.project_id == project_id)
    return list(session.scalars(q))


def get(session: Session, budget_id: str) -> m.Budget:
    row = session.get(m.Budget, budget_id) if len(budget_id) <= 36 else None
    if row is None:
        raise NotFound(f"budget {budget_id[:36]!r} not found; GET /v1/budgets lists them",
                       "gpu_tenancy.budget_not_found")
    return row


def add(session: Session, now: int, project_id: str, gpu_model: str, gpu_hours: float,
        period: str, start: int | None, end: int | None) -> m.Budget:
    if not math.isfinite(gpu_hours):   # SQLite cannot store NaN; PostgreSQL would, and no budget check holds
        raise BadRequest("gpu_hours must be a finite number", "gpu_tenancy.invalid_input")
    known = known_gpu_models(session)
    if gpu_model not in known:
        raise BadRequest(f"unknown GPU model {gpu_model}; the cloud's GPU models are: "
                         f"{', '.join(sorted(known)) or 'none'}", "gpu_tenancy.unknown_gpu_model")
    if period == budget.RANGE and (start is None or end is None or end <= start):
        raise BadRequest("a budget over a range needs start and end, end after start", "gpu_tenancy.bad_period")
    if period == budget.MONTH and (start is not None or end is not None):
        raise BadRequest("a monthly budget takes no start or end", "gpu_tenancy.bad_period")
    row = m.Budget(id=str(uuid.uuid4()), project_id=project_id, gpu_model=gpu_model, gpu_hours=float(gpu_hours),
                   period=period, start_at=utcnow_naive(start) if start is not None else None,
                   end_at=utcnow_naive(end) if end is not None else None, created_at=utcnow_naive(now))
    session.add(row)
    session.flush()
    return row


def spans(session: Session, project_id: str, gpu_model: str, start: int, end: int, now: int,
          except_lease: str | None = None) -> list[budget.Span]:
    """The project's GPUs of the model over [start, end): held, committed (a parked lease's
    held slot among them: it uses it when it resumes), or asked for by a waiting lease (at its
    planned or requested start, never before `now`: a lease still waiting has used nothing,
    and the time it asked for past is still to come, planned, in the period it will run)."""
    held = used_between(session, start, end, project_id) + holds_between(session, start, end, PARKED, project_id)
    out = [budget.Span(h.gpus, h.start, h.end) for h in held
           if h.gpu_model == gpu_model and h.lease_id != except_lease]
    for row in session.scalars(select(m.Lease).where(
            m.Lease.project_id == project_id, m.Lease.gpu_model == gpu_model,
            m.Lease.status.in_([S.REQUESTED.value, S.QUEUED.value]))):
        if row.id != except_lease:
            a = max(to_epoch(row.start_at or row.earliest_start), now)
            out.append(budget.Span(row.gpus_per_vm * row.instances, a, a + row.duration))
    return out


def uses(session: Session, row: m.Budget, now: int) -> budget.BudgetUse | None:
    """The budget's figures for the period that holds `now` (a range, begun, over or not:
    its own)."""
    b = domain_budget(row)
    if b.period == budget.MONTH:
        period = budget.month_of(now)
    else:
        assert b.start is not None and b.end is not None   # a range has both
        period = (b.start, b.end)
    return budget.use(b, period, spans(session, b.project_id, b.gpu_model, *period, now), now)


def current_uses(session: Session, now: int, project_id: str | None = None
                 ) -> dict[str, list[tuple[m.Budget, budget.BudgetUse | None]]]:
    """Each budget of one project (or all) with its figures for the period holding now."""
    out: dict[str, list] = {}
    for row in listing(session, project_id):
        out.setdefault(row.project_id, []).append((row, uses(session, row, now)))
    return out


def check(session: Session, now: int, project_id: str, gpu_model: str, asked: budget.Span,
          except_lease: str | None = None) -> None:
    """Refuse (403, with used, planned and left) a lease or extension that would pass a budget."""
    refused = refusals(session, now, project_id, gpu_model, asked, except_lease)
    if refused:
        raise Forbidden("refused for budget: " + "; ".join(refused), "gpu_tenancy.over_budget")


def refusals(session: Session, now: int, project_id: str, gpu_model: str, asked: budget.Span,
             except_lease: str | None = None) -> list[str]:
    """Why `asked` would pass one of the project's budgets of the model; empty when it fits (the
    engine's own grants, such as a reclaim called off (engine/early_ends.py), ask this)."""
    rows = [r for r in listing(session, project_id) if r.gpu_model == gpu_model]
    if not rows or asked.end <= asked.start:
        return []
    others = spans(session, project_id, gpu_model, *_reach(rows, asked), now, except_lease=except_lease)
    return budget.refusals([domain_budget(r) for r in rows], others, asked, now)


def check_move(session: Session, now: int, row: m.Lease, new: budget.Span, keeps: str) -> None:
    """Refuse (403, as check) moving the lease's allocations (a parked lease's held slot, moved
    sooner by its tenant: engine/resume.py) to `new` where that adds hours to a period past its
    budget, or takes one past it. `keeps`: what stays as it was, in words, ending the refusal."""
    rows = [r for r in listing(session, row.project_id) if r.gpu_model == row.gpu_model]
    if not rows or new.end <= new.start:
        return
    old = [budget.Span(a.gpus, to_epoch(a.start_at), to_epoch(a.end_at)) for a in row.allocations]
    whole = budget.Span(new.gpus, min([new.start, *(o.start for o in old)]), max([new.end, *(o.end for o in old)]))
    held = spans(session, row.project_id, row.gpu_model, *_reach(rows, whole), now)   # its own slot among them
    refused = budget.move_refusals([domain_budget(r) for r in rows], held, old, new, now)
    if refused:
        raise Forbidden("refused for budget: " + "; ".join(refused) + f"; {keeps}", "gpu_tenancy.over_budget")


def _reach(rows: list[m.Budget], asked: budget.Span) -> tuple[int, int]:
    """The time the asked span's periods cover: spans outside cannot count."""
    start, end = asked.start, asked.end
    for r in rows:
        for a, z in budget.periods(domain_budget(r), asked.start, asked.end):
            start, end = min(start, a), max(end, z)
    return start, end

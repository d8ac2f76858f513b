"""Reclaim and preemption, carried out: the engine's replan asks the domain
(domain/reclaim.py) which running leases to end early, warns each at once and
cuts its hold at the notice deadline in the ledger; at the deadline the engine
ends it, and it finishes as `preempted` with its data volume kept."""
from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ledger_lock, session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import planner, reclaim
from gpu_tenancy.domain.budget import Span
from gpu_tenancy.domain.model import Plan
from gpu_tenancy.domain.planner import fmt_time
from gpu_tenancy.domain.states import FINAL, WAITING, LeaseState
from gpu_tenancy.engine import budgets, ledger
from gpu_tenancy.engine.events import record_event

S = LeaseState
RECLAIMED, PREEMPTED = "reclaimed", "preempted"


def settings(config: Config) -> reclaim.ReclaimSettings:
    return reclaim.ReclaimSettings(reclaim_after=config.reclaim_after_seconds,
                                   notice=config.reclaim_notice_seconds,
                                   min_runtime=config.reclaim_min_runtime_seconds)


def replan(session: Session, clock, config: Config, planner_settings: planner.PlannerSettings, actor: str) -> Plan:
    """The engine's replan: plan, decide what to end early for whom, and plan again
    if anything was; the queue reasons then tell both. One clock reading, taken under
    the ledger lock, for all of it. The caller commits."""
    ledger_lock(session)
    return replan_locked(session, clock.now(), config, planner_settings, actor)


def replan_at(session: Session, now: int, config: Config, planner_settings: planner.PlannerSettings,
              actor: str = "planner") -> Plan:
    """ledger.replan made the engine's whole replan, at the caller's `now`: the replans the API
    runs (a cancel, a change of end, a quota) leave waiting leases the reclaims and ETAs the
    engine's next pass gives them, not without them for one pass. The caller commits."""
    ledger_lock(session)
    return replan_locked(session, now, config, planner_settings, actor)


def plan_new(session: Session, clock: Callable[[], int], config: Config, planner_settings: planner.PlannerSettings,
             lease_id: str) -> m.Lease:
    """ledger.plan_new with the engine's whole replan, early ends and their reasons included: a
    new lease is answered with the reasons and ETA the engine's next pass gives it."""
    def whole(session: Session, now: int, settings: planner.PlannerSettings, actor: str) -> Plan:
        return replan_locked(session, now, config, settings, actor)
    return ledger.plan_new(session, clock, planner_settings, lease_id, replan=whole)


def replan_locked(session: Session, now: int, config: Config, planner_settings: planner.PlannerSettings,
                  actor: str) -> Plan:
    """replan, under the ledger lock, at `now`. Notices are called off before the plan (their
    lease was cancelled or started since) and after it (their lease started in this pass: the
    plan after a reclaim can start it on other GPUs that the reclaim moved another lease off)."""
    call_off_unneeded(session, now, planner_settings, actor)
    plan = ledger.replan(session, now, planner_settings, actor)
    reasons: dict[str, list[dict]] = {}
    etas: dict[str, int] = {}
    # only running leases that borrow or are preemptible can be ended early: usually none, and then
    # there is nothing more to load or plan
    takeable = frozenset(session.scalars(select(m.Lease.id).where(
        m.Lease.status == S.ACTIVE.value, m.Lease.early_end_at.is_(None),
        m.Lease.borrowing | m.Lease.preemptible)))
    inputs = ledger.load_inputs(session, now, planner_settings) if takeable else None
    if inputs is not None and inputs.waiting:
        decided = reclaim.early_ends(
            now, inputs.hosts, inputs.holds, inputs.quotas, inputs.waiting, inputs.usage, plan, settings(config),
            takeable=takeable, yielded=yielded_pairs(session),
            planner_settings=ledger.settings_for(inputs, planner_settings))
        if decided.ends and not still_running(session, [end.lease_id for end in decided.ends]):
            decided = reclaim.EarlyEndPlan()
        for end in decided.ends:
            apply(session, now, end, actor)
        if decided.ends:
            session.flush()
            plan = ledger.replan(session, now, planner_settings, actor)
        etas = decided.etas
        for lease_id, notes in decided.notes.items():
            noted = session.get_one(m.Lease, lease_id)
            for note in notes:
                if note.code == "reclaim":      # told once, as an event; the pending ends say the rest
                    record_event(session, noted, "reclaim", note.message, now, actor)
                else:
                    reasons.setdefault(lease_id, []).append({"code": note.code, "message": note.message})
    if call_off_unneeded(session, now, planner_settings, actor):
        plan = ledger.replan(session, now, planner_settings, actor)   # (no start moves: the hosts may)
    for victim in session.scalars(select(m.Lease).where(m.Lease.status == S.ACTIVE.value,
                                                        m.Lease.early_end_at.is_not(None))):
        assert victim.early_end_for is not None and victim.early_end_at is not None   # set together
        what = "is borrowing" if victim.early_end_kind == RECLAIMED else "runs preemptible"
        whose = "this project" if victim.project_id == victim.early_end_for_project else "another project"
        reasons.setdefault(victim.early_end_for, []).append({"code": "reclaim", "message": (   # (no lease named)
            f"{whose} {what} {victim.gpus_per_vm * victim.instances} {victim.gpu_model}; "
            f"{victim.early_end_kind} for this lease, they are free at "
            f"{fmt_time(to_epoch(victim.early_end_at))}")})
    for lease_id, extra in reasons.items():
        row = session.get(m.Lease, lease_id)
        if row is not None and row.status == S.QUEUED.value:
            row.queue_reasons = [*(row.queue_reasons or []), *extra]
    for lease_id, eta in etas.items():   # the start the reclaims its reasons announce give it
        row = session.get(m.Lease, lease_id)
        if row is not None and row.status == S.QUEUED.value and (row.queue_eta is None
                                                                 or utcnow_naive(eta) < row.queue_eta):
            row.queue_eta = row.start_at = utcnow_naive(eta)
            row.end_at = utcnow_naive(eta + row.duration)
            row.planned_hosts = None   # which hosts the reclaim frees is not known: no fit counts on them
    return plan


def call_off_unneeded(session: Session, now: int, planner_settings: planner.PlannerSettings, actor: str) -> bool:
    """A lease under notice whose beneficiary no longer waits (it was cancelled or expired, or it
    got GPUs elsewhere: another lease ended early) gets its own end back, if that end still fits
    as an extension would (no over-commit, within quota, delays nobody, within the project's
    budget). A beneficiary given the noticed GPUs themselves, from the notice's end, is a hold
    there: the extension conflicts. The hours the notice gave back, spent meanwhile by the
    project (a lease its budget then had room for): the budget refuses them."""
    gone = [S.CANCELLED.value, S.EXPIRED.value]
    waits = [s.value for s in WAITING]
    beneficiary = m.Lease.__table__.alias("beneficiary")
    rows = list(session.execute(
        select(m.Lease, beneficiary.c.status).join(beneficiary, beneficiary.c.id == m.Lease.early_end_for)
        .where(m.Lease.status == S.ACTIVE.value, m.Lease.early_end_at > utcnow_naive(now),
               m.Lease.early_end_from.is_not(None), beneficiary.c.status.not_in(waits))
        # each is checked with those before it given their ends back: in the order the replay's
        # whatif/reclaims.py takes them (its lease ids are the trace's: ties at one second differ)
        .order_by(m.Lease.early_end_at, m.Lease.created_at, m.Lease.id)
        # locked (after the ledger lock, as ever): the engine ending one at its notice meanwhile
        # (lease_in) waits for this, or this finds it no longer active
        .with_for_update(of=m.Lease)))
    called = False
    for row, status in rows:
        inputs = ledger.load_inputs(session, now, planner_settings)
        assert row.early_end_from is not None   # as selected
        own_end = to_epoch(row.early_end_from)
        if planner.extension_conflicts(now, inputs.hosts, inputs.holds, inputs.quotas, inputs.waiting,
                                       inputs.usage, row.id, own_end, planner_settings):
            continue   # its GPUs are promised again: the notice stands
        if row.end_at is not None and budgets.refusals(session, now, row.project_id, row.gpu_model, Span(
                row.gpus_per_vm * row.instances, to_epoch(row.end_at), own_end)):
            continue   # its hours are spent again: the notice stands, as an extension would be refused
        for alloc in row.allocations:
            alloc.end_at = row.early_end_from
        why = "is gone" if status in gone else "has GPUs elsewhere"
        record_event(session, row, "change", f"no longer {row.early_end_kind}: the lease it was to make "
                                             f"room for {why}; it ends at "
                                             f"{fmt_time(own_end)} again", now, actor)
        row.end_at, row.warned_at = row.early_end_from, None
        row.early_end_at = row.early_end_kind = row.early_end_for = row.early_end_for_project = None
        row.early_end_reason = row.early_end_from = None
        session.flush()
        called = True
    return called


def yielded_pairs(session: Session) -> frozenset[tuple[str, str]]:
    """(project, other): project's leases were reclaimed for other's lease, which is not
    over yet; until it is, project may not reclaim from other."""
    # from the beneficiaries not over yet (ix_leases_status: the few live leases) to the leases
    # reclaimed for them (ix_leases_early_end_for), not from every lease ever made: "not final"
    # said as NOT IN is served by no index, and each replan read the whole table for it
    live = [s.value for s in LeaseState if s not in FINAL]
    beneficiary = m.Lease.__table__.alias("beneficiary")
    rows = session.execute(
        select(m.Lease.project_id, m.Lease.early_end_for_project).select_from(beneficiary)
        .join(m.Lease, m.Lease.early_end_for == beneficiary.c.id)
        .where(beneficiary.c.status.in_(live), m.Lease.early_end_kind == RECLAIMED))
    return frozenset((p, other) for p, other in rows if other is not None)   # always set with the kind


def still_running(session: Session, lease_ids: list[str]) -> bool:
    """The leases a reclaim chose, locked (after the ledger lock, as ever) and read again: all
    still running with no notice. An engine step that moves a running lease takes its row lock
    alone (a park, an end at its time, a failure) and may have committed since the plan's inputs
    were read; a notice written over it then (a parking lease's end cut, `preempted` pending)
    would end it for a lease long started once it resumed. The decision is then dropped whole,
    its ETAs and reasons with it: the next pass decides again on what is."""
    rows = session.scalars(select(m.Lease).where(m.Lease.id.in_(lease_ids)).order_by(m.Lease.id)
                           .with_for_update().execution_options(populate_existing=True)).all()
    return len(rows) == len(set(lease_ids)) and all(
        row.status == S.ACTIVE.value and row.early_end_at is None for row in rows)


def apply(session: Session, now: int, end: reclaim.EarlyEnd, actor: str) -> None:
    """Warn the lease and cut its hold at the deadline, so the plan counts on its GPUs then."""
    row = session.get_one(m.Lease, end.lease_id)
    stamp = utcnow_naive(end.at)
    for alloc in row.allocations:
        if alloc.end_at > stamp:
            alloc.end_at = stamp
    row.early_end_from = row.end_at
    row.end_at = min(row.end_at, stamp) if row.end_at else stamp
    row.early_end_at, row.early_end_kind, row.early_end_reason = stamp, end.kind, end.message
    row.early_end_for, row.early_end_for_project = end.for_lease, end.for_project
    row.warned_at = utcnow_naive(now)   # this warning stands for the usual one before the end
    record_event(session, row, "warning", end.message, now, actor)


def end_due(lifecycle) -> None:
    """End the leases whose notice has run out (before the usual ends, so their reason is told)."""
    now = lifecycle.clock.now()
    with session_scope(lifecycle.sessions) as session:
        due = list(session.execute(select(m.Lease.id, m.Lease.early_end_kind).where(
            m.Lease.status == S.ACTIVE.value, m.Lease.early_end_at <= utcnow_naive(now))))
    for lease_id, kind in due:   # its end read again under its lock: a notice called off meanwhile keeps it
        lifecycle.begin_end(lease_id, f"{kind} for another lease: its notice is over", now)


def final_state(row: m.Lease) -> LeaseState:
    """Where an ending lease finishes: preempted if it was ended early with notice, at the
    notice's end (its end cut there, end_allocations_at); one its owner (or an idle rule) ended
    before that was not preempted: it ended."""
    if row.early_end_kind and row.early_end_at is not None and row.end_at is not None \
            and row.end_at >= row.early_end_at:
        return S.PREEMPTED
    return S.ENDED

"""GPUs held but idle: the guest agent's utilisation reports, kept compactly (the last
report per VM, and measured and used GPU-seconds per lease and hour), the figures
read from them, and the operator's idle rules applied each engine pass. The
arithmetic is in domain/gpu_activity.py."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain import gpu_activity as ga
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import park, webhooks
from gpu_tenancy.engine.events import StillSo, record_event
from gpu_tenancy.engine.usage import gpu_hours
from gpu_tenancy.errors import BadRequest, Conflict, TooManyRequests
from gpu_tenancy.timeutil import rfc3339

S = LeaseState
ACTOR = "engine"
# a VM's reports come at least this far apart (the agent sends one a minute)
MIN_SPACING = 30


@dataclass(frozen=True)
class Report:
    instance: int
    gpus: list[ga.GpuSample]


def record(session: Session, now: int, row: m.Lease, report: Report, idle_percent: float) -> m.LeaseActivity:
    """Keep one VM's report: its share of the hour's GPU-seconds, the lease's last busy time,
    and the report itself (replacing its previous one). Too soon after the VM's previous
    report: 429, nothing kept."""
    if row.status != S.ACTIVE.value:
        raise Conflict(f"lease {row.id} is {row.status}; utilisation is reported while it is active",
                       codes.LEASE_NOT_RUNNING)
    if report.instance >= row.instances:
        raise BadRequest(f"lease {row.id} has no VM {report.instance} (it has {row.instances})",
                         codes.UNKNOWN_INSTANCE)
    if len(report.gpus) > row.gpus_per_vm:
        raise BadRequest(f"a VM of lease {row.id} has {row.gpus_per_vm} GPUs; the report names "
                         f"{len(report.gpus)}", codes.TOO_MANY_GPUS)
    # one lease's reports one at a time (its VMs' agents start together): the first ones would
    # both make the activity row and the hour's cell (SQLite's transactions are serial already)
    session.execute(select(m.Lease.id).where(m.Lease.id == row.id).with_for_update())
    activity = session.get(m.LeaseActivity, row.id)
    key = str(report.instance)
    previous = activity.reported.get(key) if activity is not None else None
    if previous is not None and now - previous < MIN_SPACING:
        wait = MIN_SPACING - (now - previous)
        raise TooManyRequests(f"VM {report.instance} of lease {row.id} reported {now - previous} s ago; "
                              f"report at most every {MIN_SPACING} s", wait, codes.TOO_MANY_REQUESTS)
    stamp = utcnow_naive(now)
    if activity is None:
        activity = m.LeaseActivity(lease_id=row.id, first_report_at=stamp, last_report_at=stamp, reported={},
                                   latest={})
        session.add(activity)
    seconds = ga.credited_seconds(previous, now, to_epoch(row.start_at) or now)
    add_use(session, row, now - seconds, now, report.gpus)
    activity.last_report_at = stamp
    if ga.is_busy(report.gpus, idle_percent):
        activity.busy_at = stamp
    # new dicts: the JSON columns are saved when reassigned
    activity.reported = {**activity.reported, key: now}
    activity.latest = {**activity.latest, key: [[s.utilization, s.memory_used_mib] for s in report.gpus]}
    return activity


def add_use(session: Session, row: m.Lease, start: int, end: int, samples: list[ga.GpuSample]) -> None:
    for hour, seconds in ga.by_hour(start, end):
        measured, used = ga.use_of(samples, seconds)
        cell = session.get(m.GpuUseHour, (row.id, utcnow_naive(hour)))
        if cell is None:
            cell = m.GpuUseHour(lease_id=row.id, hour=utcnow_naive(hour), project_id=row.project_id,
                                gpu_model=row.gpu_model, measured_gpu_seconds=0.0, used_gpu_seconds=0.0)
            session.add(cell)
        cell.measured_gpu_seconds += measured
        cell.used_gpu_seconds += used


def summary(activity: m.LeaseActivity, now: int, next_after: int) -> dict:
    """The answer to a report."""
    return {"instance_reports": len(activity.reported), "last_report_at": rfc3339(to_epoch(activity.last_report_at)),
            "busy_at": rfc3339(to_epoch(activity.busy_at)),
            "idle_seconds": ga.idle_seconds(to_epoch(activity.first_report_at), to_epoch(activity.last_report_at),
                                            to_epoch(activity.busy_at), now),
            "next_report_after": next_after}


# --- figures ------------------------------------------------------------------------------
def use_by_project(session: Session, start: int, end: int, now: int) -> list[dict]:
    """Per project and GPU model over [start, end): GPU-hours allocated (the ledger's), measured
    (covered by the agents' reports) and used (weighted by utilisation)."""
    allocated = gpu_hours(session, start, end, now)
    reported: dict[tuple[str, str], tuple[float, float]] = {}
    for project, model, measured, used in session.execute(
            select(m.GpuUseHour.project_id, m.GpuUseHour.gpu_model, func.sum(m.GpuUseHour.measured_gpu_seconds),
                   func.sum(m.GpuUseHour.used_gpu_seconds))
            .where(m.GpuUseHour.hour >= utcnow_naive(start - start % ga.HOUR), m.GpuUseHour.hour < utcnow_naive(end))
            .group_by(m.GpuUseHour.project_id, m.GpuUseHour.gpu_model)):
        reported[(project, model)] = (float(measured or 0), float(used or 0))
    keys = sorted({(p, model) for p, models in allocated.items() for model in models} | set(reported))
    rows = []
    for project, model in keys:
        measured, used = reported.get((project, model), (0.0, 0.0))
        rows.append({"project_id": project, "gpu_model": model,
                     "allocated_gpu_hours": round(allocated.get(project, {}).get(model, 0.0), 3),
                     "measured_gpu_hours": round(measured / 3600, 3), "used_gpu_hours": round(used / 3600, 3),
                     "used_share": round(used / measured, 3) if measured else None})
    return rows


def all_use(session: Session) -> dict[tuple[str, str], tuple[float, float]]:
    """Every lease's measured and used GPU-seconds ever, per project and GPU model."""
    rows = session.execute(select(m.GpuUseHour.project_id, m.GpuUseHour.gpu_model,
                                  func.sum(m.GpuUseHour.measured_gpu_seconds), func.sum(m.GpuUseHour.used_gpu_seconds))
                           .group_by(m.GpuUseHour.project_id, m.GpuUseHour.gpu_model))
    return {(p, model): (float(a or 0), float(b or 0)) for p, model, a, b in rows}


def idle_now(session: Session, now: int, idle_minutes: int) -> list[dict]:
    """Active leases whose agents have reported every GPU idle for at least `idle_minutes`,
    longest idle first."""
    rows = session.execute(select(m.Lease, m.LeaseActivity).join(
        m.LeaseActivity, m.LeaseActivity.lease_id == m.Lease.id).where(m.Lease.status == S.ACTIVE.value))
    out = []
    for lease, activity in rows:
        idle = idle_for(activity, now)
        if idle >= idle_minutes * 60:
            out.append({"lease_id": lease.id, "project_id": lease.project_id, "gpu_model": lease.gpu_model,
                        "gpus": lease.gpus_per_vm * lease.instances, "idle_minutes": idle // 60})
    return sorted(out, key=lambda r: (-r["idle_minutes"], r["lease_id"]))


def idle_for(activity: m.LeaseActivity, now: int) -> int:
    return ga.idle_seconds(to_epoch(activity.first_report_at), to_epoch(activity.last_report_at),
                           to_epoch(activity.busy_at), now)


# --- the operator's rules -----------------------------------------------------------------
def apply_rules(lifecycle) -> None:
    """Warn about leases idle past their rule's warning (an event and the lease.idle webhook),
    and end (or park: engine/park.py) those idle past its end, after the warning."""
    rules = lifecycle.config.idle_rule_set
    if not rules:
        return
    now = lifecycle.clock.now()
    to_end: list[tuple[str, str, ga.IdleRule]] = []
    to_park: list[tuple[str, str, ga.IdleRule]] = []
    with session_scope(lifecycle.sessions) as session:
        rows = session.execute(select(m.Lease, m.LeaseActivity).join(
            m.LeaseActivity, m.LeaseActivity.lease_id == m.Lease.id).where(m.Lease.status == S.ACTIVE.value))
        for lease, activity in rows:
            rule = ga.rule_for(rules, lease.project_id, lease.priority_class)
            if rule is None:
                continue
            idle = idle_for(activity, now)
            step = step_now(rule, activity, now)
            if step == "warn":
                activity.idle_warned_at = utcnow_naive(now)
                warn(session, lease, rule, idle, now, lifecycle.config.idle_utilization_percent)
            elif step in ("end", "park"):
                why = (f"idle for {idle // 60} min: every GPU under "
                       f"{lifecycle.config.idle_utilization_percent:g} % (the operator's idle rule)")
                if step == "end":
                    to_end.append((lease.id, why, rule))
                elif park.can_park(lease):
                    to_park.append((lease.id, why, rule))
    # each step asks again, under the lease's lock, whether it is still due: a report that the
    # GPUs are busy, accepted since the records were read, keeps the lease
    for lease_id, why, rule in to_end:
        lifecycle.begin_end(lease_id, why, still=still_due(rule, "end"))
    for lease_id, why, rule in to_park:
        park.begin(lifecycle, lease_id, why, still=still_due(rule, "park"))


def step_now(rule: ga.IdleRule, activity: m.LeaseActivity, now: int) -> str | None:
    since = ga.idle_since(to_epoch(activity.first_report_at), to_epoch(activity.busy_at))
    return ga.idle_step(rule, idle_for(activity, now), since, to_epoch(activity.idle_warned_at), now)


def still_due(rule: ga.IdleRule, step: str) -> StillSo:
    def still(session: Session, row: m.Lease, now: int) -> bool:
        activity = session.get(m.LeaseActivity, row.id, populate_existing=True)
        return activity is not None and step_now(rule, activity, now) == step
    return still


def warn(session: Session, lease: m.Lease, rule: ga.IdleRule, idle: int, now: int, percent: float) -> None:
    then = ""
    if rule.then == "end" and rule.then_after:
        then = f"; it will be ended after {rule.then_after // 60} idle minutes unless its GPUs are used"
    elif rule.then == "park" and rule.then_after and park.can_park(lease):
        then = (f"; it will be parked after {rule.then_after // 60} idle minutes unless its GPUs are used "
                "(its VMs shelved, disk and data volume kept, its GPUs given back until a resume slot)")
    elif rule.then == "park":
        then = "; it is not parked: the servers of a lease the tenant boots are the tenant's"
    message = (f"every GPU of the lease has been under {percent:g} % for {idle // 60} min{then}. "
               "End it (DELETE, or gpu-done in the VM) to give the GPUs back")
    record_event(session, lease, "warning", message, now, ACTOR)
    webhooks.enqueue(session, lease, webhooks.IDLE, webhooks.idle_payload(lease, now, idle, message), now)


"""Prometheus metrics, named after Kueue's (kueue_admission_wait_time_seconds,
kueue_pending_workloads, ...) with the prefix gpu_tenancy_.

Lease figures are read from the database at scrape time, so every API worker
and the engine report the same numbers whichever process is scraped, and a
restart loses nothing: counters and the wait histogram are counts over all
leases ever recorded (the GPU-hour counters from running totals,
engine/metric_rollups.py, so their cost does not grow with history, each never below what
it showed before). Only the planner's duration is measured in the process
that ran the plan (set PROMETHEUS_MULTIPROC_DIR to add up several processes)."""
from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Counter as CounterMetric, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from sqlalchemy import func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch
from gpu_tenancy.domain.eta_honesty import ETA_SLACK, eta_honesty
from gpu_tenancy.domain.states import WAITING, LeaseState
from gpu_tenancy.engine.held import allowance, held_between

PREFIX = "gpu_tenancy_"
# waits from seconds (started at once) to days (a week-long queue)
WAIT_BUCKETS = (1, 10, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
# lateness past the first ETA: 0 (on time or early), the slack ETA kept allows, then up to a week
LATENESS_BUCKETS = (0, ETA_SLACK, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)

PLANNER_SECONDS = Histogram(
    PREFIX + "planner_duration_seconds", "Time to plan every waiting lease once (a full replan).",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=None)
CREATE_REPLANS = CounterMetric(
    PREFIX + "lease_create_replans", "Lease creations by how their lease was planned: by a replan of their "
    "own (replanned), by one another request ran after they were committed (shared), or fitted into the "
    "current plan without a replan (fitted).",
    labelnames=["outcome"], registry=None)


def cumulative(values, bounds) -> tuple[list[tuple[str, int]], float]:
    """A histogram sample's buckets (values at or below each bound, then +Inf) and sum."""
    buckets = [(floatToGoString(b), sum(1 for v in values if v <= b)) for b in bounds]
    return buckets + [("+Inf", len(values))], sum(values)


def first_provisioning():
    """Each lease's first start of a boot: when it first had its GPUs. A lease re-placed later
    (its boot failed, its host went down, its VMs lost off the shelf) gets a new committed
    start_at; the wait and ETA figures are of the start it was first given."""
    return (select(m.Event.lease_id, func.min(m.Event.at).label("at"))
            .where(m.Event.to_state == LeaseState.PROVISIONING.value).group_by(m.Event.lease_id).subquery())


def first_start(committed, first_boot) -> int | None:
    """The start a lease first had: its committed start, or its first boot if that came sooner
    (the lease was re-placed since, or waits again with no start planned)."""
    starts = [to_epoch(t) for t in (committed, first_boot) if t is not None]
    return min(starts) if starts else None


class LeaseCollector:
    def __init__(self, sessions, clock, floor: int, idle_minutes: int = 30):
        self.sessions, self.clock, self.floor, self.idle_minutes = sessions, clock, floor, idle_minutes

    def collect(self):
        now = self.clock.now()
        with session_scope(self.sessions) as session:
            yield self._leases(session)
            yield self._pending(session)
            yield self._admission_wait(session)
            yield from self._eta_honesty(session, now)
            yield from self._gpus(session, now)
            yield from self._gpu_use(session, now)
            yield self._failures(session)

    def _leases(self, session):
        family = GaugeMetricFamily(PREFIX + "leases", "Leases by status.", labels=["status"])
        for status, count in session.execute(select(m.Lease.status, func.count()).group_by(m.Lease.status)):
            family.add_metric([status], count)
        return family

    def _pending(self, session):
        family = GaugeMetricFamily(PREFIX + "pending_leases",
                                   "Leases waiting for GPUs, by GPU model and the first reason they wait.",
                                   labels=["gpu_model", "reason"])
        counts: Counter = Counter()
        rows = session.execute(select(m.Lease.gpu_model, m.Lease.queue_reasons).where(
            m.Lease.status.in_([s.value for s in WAITING])))
        for model, reasons in rows:
            counts[(model, (reasons or [{}])[0].get("code", "unplanned"))] += 1
        for labels, count in sorted(counts.items()):
            family.add_metric(list(labels), count)
        return family

    def _admission_wait(self, session):
        """From the requested start to the start, for every lease that ever began to boot. Not
        from its scheduling: a lease booked ahead has not started (its start may still move, or
        go, as when its hosts go down and it waits again: an observation taken back is a counter
        going down), and one cancelled before its start never got the GPUs it waited for."""
        family = HistogramMetricFamily(PREFIX + "admission_wait_time_seconds",
                                       "Time from a lease's requested start to its start, for started leases.",
                                       labels=["gpu_model"])
        waits: dict[str, list[float]] = {}
        began = first_provisioning()
        asked = func.coalesce(m.Lease.asked_start, m.Lease.earliest_start)   # not moved by a re-placement
        rows = session.execute(select(m.Lease.gpu_model, asked, m.Lease.start_at, began.c.at)
                               .join(began, began.c.lease_id == m.Lease.id))
        for model, earliest, start, first in rows:
            waits.setdefault(model, []).append(max(0, (first_start(start, first) or 0) - to_epoch(earliest)))
        for model, values in sorted(waits.items()):
            family.add_metric([model], *cumulative(values, WAIT_BUCKETS))
        return family

    def _eta_honesty(self, session, now: int):
        """Leases that waited with a first ETA and have started: the share that started by
        it + ETA_SLACK, and their lateness past it (domain/eta_honesty.py); and of those told a
        start-by with it (domain/start_by.py), the share that started by that + ETA_SLACK."""
        began = first_provisioning()   # started: as the wait histogram, a start that can no longer go
        rows = session.execute(select(m.Lease.gpu_model, m.Lease.first_eta, m.Lease.first_start_by,
                                      m.Lease.start_at, began.c.at)
                               .join(began, began.c.lease_id == m.Lease.id).where(m.Lease.first_eta.is_not(None)))
        pairs: dict[str, list[tuple[int, int]]] = {}
        start_by_pairs = []
        for model, eta, start_by, committed, first in rows:
            start = first_start(committed, first)
            if start is None:
                continue
            pairs.setdefault(model, []).append((to_epoch(eta), start))
            if start_by is not None:
                start_by_pairs.append((to_epoch(start_by), start))
        ratio = GaugeMetricFamily(PREFIX + "eta_kept_ratio",
                                  f"Of the leases that waited and have started, the share that started no later "
                                  f"than the ETA they were first given + {ETA_SLACK // 60} min.")
        everyone = eta_honesty(pair for values in pairs.values() for pair in values)
        if everyone.kept_ratio is not None:
            ratio.add_metric([], everyone.kept_ratio)
        yield ratio
        start_by_kept = GaugeMetricFamily(PREFIX + "start_by_kept_ratio",
                                          f"Of the leases that waited and have started, told a start-by with their "
                                          f"first ETA, the share that started no later than it + "
                                          f"{ETA_SLACK // 60} min.")
        told = eta_honesty(start_by_pairs)
        if told.kept_ratio is not None:
            start_by_kept.add_metric([], told.kept_ratio)
        yield start_by_kept
        lateness = HistogramMetricFamily(PREFIX + "eta_lateness_seconds",
                                         "How long past the ETA they were first given leases that waited started "
                                         "(0: on time or early).", labels=["gpu_model"])
        for model, values in sorted(pairs.items()):
            lateness.add_metric([model], *cumulative(eta_honesty(values).lateness, LATENESS_BUCKETS))
        yield lateness

    def _gpus(self, session, now: int):
        in_use = GaugeMetricFamily(PREFIX + "gpus_in_use", "GPUs held by leases now (until the cloud has "
                                   "released them), by model and project.", labels=["gpu_model", "project_id"])
        held_now: Counter = Counter()
        for hold in held_between(session, now, now, now + 1, allowance(session, self.floor)):
            held_now[(hold.gpu_model, hold.project_id)] += hold.gpus
        for (model, project), gpus in sorted(held_now.items()):
            in_use.add_metric([model, project], gpus)
        yield in_use
        total = GaugeMetricFamily(PREFIX + "gpus", "GPUs on hosts that take new leases (up, enabled, not drained).",
                                  labels=["gpu_model"])
        rows = session.execute(select(m.Host.gpu_model, func.sum(m.Host.gpus)).where(
            m.Host.up.is_(True), m.Host.enabled.is_(True), m.Host.drained.is_(False)).group_by(m.Host.gpu_model))
        for model, gpus in rows:
            total.add_metric([model], int(gpus))
        yield total

    def _gpu_use(self, session, now: int):
        """GPU-hours allocated (the ledger's) against measured and used (the guest agents'
        reports, engine/gpu_activity.py), and the leases idle now."""
        # here, not at the top: the ledger imports this module, and usage imports the ledger's users
        from gpu_tenancy.engine import gpu_activity, metric_rollups
        labels = ["gpu_model", "project_id"]
        # running totals and the last hours since (engine/metric_rollups.py): not all of history
        counted = metric_rollups.shown(session, metric_rollups.totals(session, now))   # never lower than before
        for name, family_name, text in (
                (metric_rollups.ALLOCATED, "gpu_hours_allocated", "GPU-hours held by leases, ever."),
                (metric_rollups.MEASURED, "gpu_hours_measured", "GPU-hours the leases' guest agents reported on, "
                                                                "ever."),
                (metric_rollups.USED, "gpu_hours_used", "GPU-hours used, ever: each reported GPU counted by its "
                                                        "utilisation (one GPU at 50 % for an hour is 0.5).")):
            family = CounterMetricFamily(PREFIX + family_name, text, labels=labels)
            for (project, model), seconds in sorted(counted[name].items()):
                hours = seconds / 3600   # allocated: whole seconds, to 4 places as usage shows it
                family.add_metric([model, project], round(hours, 4) if name == metric_rollups.ALLOCATED else hours)
            yield family
        idle_leases = GaugeMetricFamily(PREFIX + "idle_leases", f"Active leases whose every GPU has been idle "
                                        f"for at least {self.idle_minutes} min, as their agents report.",
                                        labels=labels)
        idle_gpus = GaugeMetricFamily(PREFIX + "idle_gpus", "GPUs of those leases.", labels=labels)
        counts: Counter = Counter()
        gpus: Counter = Counter()
        for row in gpu_activity.idle_now(session, now, self.idle_minutes):
            counts[(row["gpu_model"], row["project_id"])] += 1
            gpus[(row["gpu_model"], row["project_id"])] += row["gpus"]
        for key in sorted(counts):
            idle_leases.add_metric(list(key), counts[key])
            idle_gpus.add_metric(list(key), gpus[key])
        yield idle_leases
        yield idle_gpus

    def _failures(self, session):
        family = CounterMetricFamily(PREFIX + "lease_failures", "Failed lease attempts (retried, re-placed or "
                                     "final), by failure class.", labels=["failure_class"])
        rows = session.execute(select(m.LeaseFailure.failure_class, func.count())
                               .group_by(m.LeaseFailure.failure_class))
        for failure, count in rows:
            family.add_metric([failure], count)
        return family


def registry_for(sessions, clock, floor: int, idle_minutes: int = 30) -> CollectorRegistry:
    """`floor`: the least release allowance (PlannerSettings.release_floor), for the GPUs held now;
    `idle_minutes`: how long a lease's GPUs are idle before it counts as idle (config idle_minutes)."""
    registry = CollectorRegistry()
    registry.register(LeaseCollector(sessions, clock, floor, idle_minutes))
    registry.register(PLANNER_SECONDS)
    registry.register(CREATE_REPLANS)
    return registry

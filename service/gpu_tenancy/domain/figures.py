"""The owners' figures, computed from plain facts about leases, holds and
hosts. Pure: epoch seconds in, rows (lists of flat dicts, ready for a chart,
CSV or JSON) out.

Definitions (each figure's docstring says the details):
- wait: a lease's start minus its requested start, for leases that started (began to boot);
- on time: running (active) within ON_TIME_SLACK of the requested start;
- first try: the first provisioning attempt went straight to active;
- idle fragmentation: free GPUs on hosts where the most common waiting shape
  does not fit."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpu_tenancy.domain.calendar import overlap

ON_TIME_SLACK = 600
HOUR = 3600


@dataclass(frozen=True)
class LeaseFacts:
    """What the figures need of one lease, read from the lease and its events."""
    lease_id: str
    project_id: str
    gpu_model: str
    gpus: int                       # per VM times VMs
    status: str
    created_at: int
    requested_start: int
    start: int | None = None        # committed start, once it was given GPUs
    active_at: int | None = None    # first time it became active
    cancelled_at: int | None = None
    first_provisioning_outcome: str | None = None  # the state after its first provisioning
    failure_class: str | None = None
    first_eta: int | None = None    # the ETA it was given when created, if it had to wait
    first_start_by: int | None = None   # the start-by told with it (domain/start_by.py), if any


@dataclass(frozen=True)
class HostNow:
    """A host's free GPUs at one instant."""
    host: str
    gpu_model: str
    gpus: int
    free: int
    in_service: bool


def day(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d")


def hour(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:00Z")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank: the smallest value with at least q% of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _share(part: float, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def wait_by_day(leases: Iterable[LeaseFacts]) -> list[dict[str, Any]]:
    """P50 and P90 of the wait in seconds, per day of the requested start, over
    leases that started (a start is set: engine/reports.py sets it at the first boot)."""
    waits: dict[str, list[int]] = defaultdict(list)
    for lease in leases:
        if lease.start is not None:
            waits[day(lease.requested_start)].append(max(0, lease.start - lease.requested_start))
    return [{"day": d, "leases": len(v), "p50_wait_seconds": percentile(v, 50), "p90_wait_seconds": percentile(v, 90)}
            for d, v in sorted(waits.items())]


def on_time_share(leases: Iterable[LeaseFacts], now: int, slack: int = ON_TIME_SLACK) -> list[dict[str, Any]]:
    """Per day of the requested start: of the leases whose requested start is
    at least `slack` ago and that their owner did not cancel before then, the
    share that were running by requested start + slack."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for lease in leases:
        deadline = lease.requested_start + slack
        if deadline > now or (lease.cancelled_at is not None and lease.cancelled_at <= deadline
                              and lease.active_at is None):
            continue
        cell = counts[day(lease.requested_start)]
        cell[0] += 1
        cell[1] += lease.active_at is not None and lease.active_at <= deadline
    return [{"day": d, "leases": n, "on_time": k, "share": _share(k, n)} for d, (n, k) in sorted(counts.items())]


def first_try_success(leases: Iterable[LeaseFacts]) -> list[dict[str, Any]]:
    """Per day of the requested start: of the leases whose first provisioning
    attempt ended (active, failed, or retried on another host or in the queue), the share that
    became active at once. An attempt the owner ended while it booted counts
    for neither side."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for lease in leases:
        outcome = lease.first_provisioning_outcome
        if outcome not in ("active", "failed", "scheduled", "queued"):
            continue
        cell = counts[day(lease.requested_start)]
        cell[0] += 1
        cell[1] += outcome == "active"
    return [{"day": d, "attempts": n, "first_try_active": k, "share": _share(k, n)}
            for d, (n, k) in sorted(counts.items())]


def failures_by_class(leases: Iterable[LeaseFacts]) -> list[dict[str, Any]]:
    """Failed leases per failure class, most first."""
    counts = Counter[str](lease.failure_class or "unknown" for lease in leases if lease.status == "failed")
    return [{"failure_class": c, "leases": n} for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def cancel_ratio(leases: Iterable[LeaseFacts]) -> list[dict[str, Any]]:
    """Per day of creation: leases created, of which cancelled, and the ratio."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for lease in leases:
        cell = counts[day(lease.created_at)]
        cell[0] += 1
        cell[1] += lease.status == "cancelled"
    return [{"day": d, "leases": n, "cancelled": k, "ratio": _share(k, n)} for d, (n, k) in sorted(counts.items())]


def hourly_gpu_use(holds: Iterable[tuple[int, int, int]], capacity: int, start: int, end: int) -> list[dict[str, Any]]:
    """Per hour of [start, end): GPUs held on average (GPU-seconds over the hour's seconds
    inside [start, end)) against `capacity` GPUs. `holds` are (start, end, gpus). An hour cut
    by the window (the hour under way when the window ends now) is of its time inside only:
    a hold's planned time past `end` has not been held yet, and may never be."""
    first = start - start % HOUR
    hours = list(range(first, end, HOUR))
    used = [0] * len(hours)
    for hold_start, hold_end, gpus in holds:
        lo = max(hold_start, first)
        index = (lo - first) // HOUR
        while 0 <= index < len(hours) and hours[index] < hold_end:
            used[index] += gpus * overlap(hold_start, hold_end, max(hours[index], start),
                                          min(hours[index] + HOUR, end))
            index += 1
    spans = [min(h + HOUR, end) - max(h, start) for h in hours]
    return [{"hour": hour(h), "gpus_in_use": round(u / span, 3), "gpus": capacity,
             "utilisation": _share(u / span, capacity)} for h, u, span in zip(hours, used, spans)]


def idle_fragmentation(hosts: Iterable[HostNow], waiting_shapes: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """Per GPU model with waiting leases: the most common waiting shape (GPUs
    per VM; the larger on a tie), the free GPUs on hosts in service, and those
    of them stranded on hosts with fewer free than that shape needs."""
    shapes: dict[str, Counter[int]] = defaultdict(Counter)
    for model, gpus_per_vm in waiting_shapes:
        shapes[model][gpus_per_vm] += 1
    by_model: dict[str, list[HostNow]] = defaultdict(list)
    for host in hosts:
        if host.in_service:
            by_model[host.gpu_model].append(host)
    rows = []
    for model in sorted(shapes):
        common = max(shapes[model].items(), key=lambda kv: (kv[1], kv[0]))[0]
        free = sum(h.free for h in by_model[model])
        stranded = sum(h.free for h in by_model[model] if 0 < h.free < common)
        rows.append({"gpu_model": model, "common_waiting_gpus_per_vm": common,
                     "waiting_leases": sum(shapes[model].values()), "free_gpus": free,
                     "stranded_gpus": stranded, "share_stranded": _share(stranded, free)})
    return rows

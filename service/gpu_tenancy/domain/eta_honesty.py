"""ETA honesty: how often a lease that waited started when it was first told.

A lease that cannot start at once is given an ETA when it is created (its
first plan). Against its real start: it kept its ETA if it started no later
than ETA + ETA_SLACK; its lateness is how far past the ETA it started (0 when
on time or early: starting early breaks no promise). The replay
(bench/metrics.py), /metrics and the admin figures all count it this way.
Pure: epoch seconds in."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpu_tenancy.domain.figures import LeaseFacts, day, percentile

ETA_SLACK = 600


def lateness(eta: int, start: int) -> int:
    """Seconds past its ETA a lease started (0 if by then)."""
    return max(0, start - eta)


def kept(eta: int, start: int, slack: int = ETA_SLACK) -> bool:
    return start <= eta + slack


@dataclass(frozen=True)
class EtaHonesty:
    leases: int                    # leases that waited, with a first ETA and a real start
    kept: int                      # of which started by ETA + slack
    lateness: tuple[int, ...]      # each one's lateness, seconds, ascending

    @property
    def kept_ratio(self) -> float | None:
        return self.kept / self.leases if self.leases else None

    def lateness_percentile(self, q: float) -> float | None:
        return percentile(self.lateness, q)


def eta_honesty(pairs: Iterable[tuple[int, int]], slack: int = ETA_SLACK) -> EtaHonesty:
    """From (first ETA, real start) of every lease that waited and started."""
    late, n_kept = [], 0
    for eta, start in pairs:
        late.append(lateness(eta, start))
        n_kept += kept(eta, start, slack)
    return EtaHonesty(len(late), n_kept, tuple(sorted(late)))


def eta_kept_by_day(leases: Iterable[LeaseFacts], now: int, slack: int = ETA_SLACK) -> list[dict[str, Any]]:
    """Per day of the real start: leases that waited with a first ETA and have
    started by `now`, the share that kept it, and P50/P90 lateness (seconds); and
    of those told a start-by with it, the share that started by that (None: none told)."""
    pairs: dict[str, list[tuple[int, int]]] = defaultdict(list)
    start_by: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for lease in leases:
        if lease.first_eta is not None and lease.start is not None and lease.start <= now:
            pairs[day(lease.start)].append((lease.first_eta, lease.start))
            if lease.first_start_by is not None:
                start_by[day(lease.start)].append((lease.first_start_by, lease.start))
    rows = []
    for d, values in sorted(pairs.items()):
        honesty, told = eta_honesty(values, slack), eta_honesty(start_by[d], slack)
        rows.append({"day": d, "leases": honesty.leases, "kept": honesty.kept,
                     "share": round(honesty.kept_ratio or 0.0, 4),
                     "p50_lateness_seconds": honesty.lateness_percentile(50),
                     "p90_lateness_seconds": honesty.lateness_percentile(90),
                     "start_by_share": None if told.kept_ratio is None else round(told.kept_ratio, 4)})
    return rows

"""Extending a lease's holds to a later end. The planner's check (planner.extension_conflicts:
its hosts, its quota, and that nobody waiting starts later) is made of the helpers here; beside
it, an optional window at the end of a lease in which alone it may be extended (Chameleon
allows the final 48 hours). Pure."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from .host_profiles import HostProfiles
from .model import Hold, Placement, Plan, QuotaLimit
from .plan_words import duration_text, fmt_time
from .profile import INF, StepProfile


def window_refusal(now: int, end: int, window: int | None) -> str | None:
    """Why an extension asked for at `now` of a lease ending at `end` is too early; None: in time."""
    if window is None or now >= end - window:
        return None
    return (f"a lease may be extended only in its last {duration_text(window)}; this one ends at {fmt_time(end)}, "
            f"so ask from {fmt_time(end - window)}")


def starts_later(before: Placement, after: Placement | None) -> bool:
    return after is None or after.start > before.start


def host_conflicts(now: int, profiles: HostProfiles, others: Sequence[Hold], on_host: Mapping[str, int],
                   old_held: int, new_end: int, allowance: int) -> list[str]:
    """Its own hosts: the GPUs it holds must stay free beside the other holds until its new end."""
    out = []
    lo, new_held = max(old_held, now), new_end + allowance
    for hname in sorted(on_host):
        prof = profiles.free(now, hname, others)
        if prof is None or prof.min_on(lo, new_held) >= on_host[hname]:
            continue
        t = prof.first_below(lo, on_host[hname])
        assert t is not None   # it is below somewhere on [lo, new_held)
        out.append(f"host {hname} is committed to another lease from {fmt_time(t)}; "
                   f"extending to {fmt_time(new_end)} would over-commit it; the GPUs are free "
                   f"until {fmt_time(t - allowance)}")
    return out


def quota_conflict(now: int, q: QuotaLimit, p: str, m: str, holds: Sequence[Hold], old_held: int,
                   new_held: int, borrowing: bool) -> list[str]:
    """The project within its quota (and what it borrows, if it does) at every instant. Its
    preemptible leases run outside quota (as the planner's QuotaBook counts): they take none of it."""
    limit = q.gpus + (q.borrow_gpus if borrowing else 0)
    qprof = StepProfile(now, limit)
    for h in holds:
        if h.project_id == p and h.gpu_model == m and h.end > now and not h.preemptible:
            qprof.add(h.start, h.end, -h.gpus)
    lo = max(old_held, now)
    if qprof.min_on(lo, new_held) >= 0:
        return []
    t = qprof.first_below(lo, 0)
    assert t is not None   # it is below zero somewhere on [lo, new_held)
    return [f"project {p} would hold {limit - qprof.min_on(lo, new_held)} of {q.gpus} {m} GPUs at {fmt_time(t)}"]


def gpus_by_host(mine: Sequence[Hold]) -> dict[str, int]:
    on_host: dict[str, int] = defaultdict(int)
    for h in mine:
        on_host[h.host] += h.gpus
    return on_host


def free_until(now: int, profiles: HostProfiles, others: Sequence[Hold], on_host: Mapping[str, int],
               before: Plan, gpv: Mapping[str, int], old_end: int) -> int | None:
    """Latest end the lease could have without touching the planned
    placements (its hosts' GPUs and its project's quota)."""
    planned = [(pl.placement, pl.lease_id) for pl in before.leases.values() if pl.placement]
    best = INF
    for hname, gpus in on_host.items():
        prof = profiles.free(now, hname, others)
        if prof is None:
            continue
        for plc, lid in planned:
            if hname in plc.hosts:
                per_vm = gpv[lid]
                prof.add(plc.start, plc.end, -per_vm * plc.hosts.count(hname))
        t = prof.first_below(max(old_end, now), gpus)
        if t is not None:
            best = min(best, t)
    return None if best >= INF else best

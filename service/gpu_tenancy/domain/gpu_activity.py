"""What a lease's GPUs did, from its VMs' utilisation reports: the GPU-seconds each
report accounts for (split by hour), when the lease was last busy, and what an
operator's idle rule says to do about a lease idle that long. Pure arithmetic."""
from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600
REPORT_INTERVAL = 60     # the guest agent reports every minute
# A report accounts for the time since the same VM's previous one, at most this: a VM that
# went silent for an hour did not report that hour, and counting it would invent use.
MAX_CREDIT = 2 * REPORT_INTERVAL
# An agent silent this long says nothing about the lease any more: idle time is not counted.
STALE_AFTER = 3 * REPORT_INTERVAL
ACTIONS = ("none", "end", "park")


@dataclass(frozen=True)
class GpuSample:
    utilization: int       # percent, 0..100
    memory_used_mib: int


def credited_seconds(previous_at: int | None, now: int, active_since: int) -> int:
    """The seconds one report of a VM accounts for: since its previous report (or, for its
    first, since the lease became active), never more than MAX_CREDIT."""
    since = previous_at if previous_at is not None else active_since
    return max(0, min(now - since, MAX_CREDIT))


def by_hour(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut at whole hours: (the hour's start, seconds in it)."""
    out = []
    at = start
    while at < end:
        hour = at - at % HOUR
        step = min(end, hour + HOUR) - at
        out.append((hour, step))
        at += step
    return out


def use_of(samples: list[GpuSample], seconds: int) -> tuple[float, float]:
    """(GPU-seconds measured, GPU-seconds used) for one report covering `seconds`: used
    counts each GPU by its utilisation, so one GPU at 50 % for an hour is half a GPU-hour."""
    measured = float(len(samples) * seconds)
    used = sum(s.utilization for s in samples) * seconds / 100.0
    return measured, used


def is_busy(samples: list[GpuSample], idle_percent: float) -> bool:
    """A report is busy when any GPU in it is at or above the idle threshold."""
    return any(s.utilization >= idle_percent for s in samples)


def idle_since(first_report_at: int, busy_at: int | None) -> int:
    """Since when the lease's GPUs have all been idle: its last busy report, or, never busy,
    its first report."""
    return busy_at if busy_at is not None else first_report_at


def idle_seconds(first_report_at: int | None, last_report_at: int | None, busy_at: int | None, now: int) -> int:
    """How long every GPU of the lease has been idle, as its reports tell; 0 without reports
    or when they stopped (STALE_AFTER): no report is no evidence of idleness."""
    if first_report_at is None or last_report_at is None or now - last_report_at > STALE_AFTER:
        return 0
    return max(0, now - idle_since(first_report_at, busy_at))


@dataclass(frozen=True)
class IdleRule:
    """An operator's rule: warn after `warn_after` idle seconds; then, with `then` = end
    (or park: shelve its VMs and hold a resume slot), end (park) the lease after
    `then_after` idle seconds (never sooner than `then_after - warn_after` after the
    warning, so the notice is always that long)."""
    warn_after: int
    then: str = "none"
    then_after: int | None = None
    project_id: str | None = None
    priority_class: str | None = None

    def __post_init__(self) -> None:
        if self.project_id is not None and self.priority_class is not None:
            raise ValueError("an idle rule names a project_id or a priority_class, not both")
        if self.warn_after < 60:
            raise ValueError("warn_after_minutes must be at least 1")
        if self.then not in ACTIONS:
            raise ValueError(f"then must be one of: {', '.join(ACTIONS)}")
        if (self.then == "none") != (self.then_after is None):
            raise ValueError("then_after_minutes is given exactly when then is not none")
        if self.then_after is not None and self.then_after <= self.warn_after:
            raise ValueError("then_after_minutes must be more than warn_after_minutes (the warning comes first)")


def rule_for(rules: tuple[IdleRule, ...], project_id: str, priority_class: str | None) -> IdleRule | None:
    """The project's own rule, else its priority class's, else the rule naming neither."""
    for wanted in (lambda r: r.project_id == project_id,
                   lambda r: priority_class is not None and r.priority_class == priority_class,
                   lambda r: r.project_id is None and r.priority_class is None):
        found = next((r for r in rules if wanted(r)), None)
        if found is not None:
            return found
    return None


def idle_step(rule: IdleRule, idle_for: int, since: int, warned_at: int | None, now: int) -> str | None:
    """What the rule says now: "warn", "end", "park" or nothing. A warning counts only if it
    was given in this idle spell (at or after `since`); the end (park) comes only after a warning."""
    warned = warned_at is not None and warned_at >= since
    if not warned:
        return "warn" if idle_for >= rule.warn_after else None
    assert warned_at is not None
    if rule.then != "none" and rule.then_after is not None and idle_for >= rule.then_after \
            and now - warned_at >= rule.then_after - rule.warn_after:
        return rule.then
    return None

"""The one short reason of a waiting lease (Slurm's squeue REASON column), and the
same reason in words that name no project, for showing other projects' leases.

A lease's reasons (model.Reason, stored as {code, message}) say everything that
keeps it waiting; the short reason is the one that holds it back the most: what
it can never get, then its own limits, then the GPUs, then who goes first.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

# most telling first
PRECEDENCE = ("unplaceable", "latest_start", "duration", "quota", "reclaim", "capacity", "priority", "order",
              "fairshare", "preemptible", "borrowing")

# What each code says of another project's lease: its messages name the project and its use.
ANONYMOUS = {
    "unplaceable": "can never be placed as asked",
    "latest_start": "no slot before its latest start",
    "duration": "longer than its project may hold GPUs",
    "quota": "waits for its project's quota",
    "reclaim": "GPUs are being freed for it",
    "capacity": "waits for free GPUs",
    "priority": "behind leases of higher priority",
    "order": "behind leases asked earlier or to start later",
    "fairshare": "behind projects that used less recently",
    "preemptible": "preemptible: runs only on idle GPUs",
    "borrowing": "borrows idle capacity",
}


def _rank(code: str) -> int:
    return PRECEDENCE.index(code) if code in PRECEDENCE else len(PRECEDENCE)


def short_reason(reasons: Sequence[Mapping[str, str]]) -> Mapping[str, str] | None:
    """The reason that holds the lease back the most (the first of equals); None without reasons."""
    if not reasons:
        return None
    return min(reasons, key=lambda r: _rank(r.get("code", "")))


# ... where the queued charge (PlannerSettings.queued_charge) changes what the code means
ANONYMOUS_CHARGED = {
    "fairshare": "behind projects that used or committed less (the queued charge)",
}


def anonymous(code: str, charged: bool = False) -> str:
    """The reason's code in words that name no project; `charged`: the queued charge is on."""
    return (charged and ANONYMOUS_CHARGED.get(code)) or ANONYMOUS.get(code, "waiting")

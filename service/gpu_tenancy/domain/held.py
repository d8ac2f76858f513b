"""What "held" means, everywhere (planner, capacity, hosts, calendar, figures, metrics).

GPUs are held from the moment an allocation is committed until the cloud has
confirmed their release (Placement shows them free), whatever the lease's state.
Until then the ledger cannot know when they come back: its best guess is the
planned end plus the release allowance (how long the cloud takes from a delete to
the release), and never before the next second while they are not released."""
from __future__ import annotations


def held_until(end: int, now: int, allowance: int) -> int:
    """When an allocation planned to end at `end`, not yet released at `now`, frees its GPUs."""
    return max(end + allowance, now + 1)


def release_allowance(measured: list[int], nominal: int | None, floor: int) -> int:
    """Seconds to plan between a lease's end and its GPUs' next use: the 90th percentile
    (nearest rank) of the cloud's recent delete-to-release times, or what the cloud says
    it takes while none is measured yet; never below the operator's floor."""
    if measured:
        ranked = sorted(measured)
        guess = ranked[-(-len(ranked) * 9 // 10) - 1]
    else:
        guess = nominal or 0
    return max(floor, guess)

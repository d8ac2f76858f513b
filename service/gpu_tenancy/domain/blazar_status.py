"""A gpu-tenancy lease's state in Blazar's words, for the Blazar-compatible API
(api/blazar/): the lease's status, its one reservation's status, and whether its
start_lease and end_lease events are done. Every state has an answer
(tests/unit/test_blazar_status.py), so a new state cannot be shown as nothing.

Blazar's leases are PENDING until their start, then STARTING, ACTIVE, TERMINATING,
TERMINATED, or ERROR. gpu-tenancy's waiting and scheduled leases are all PENDING (an
old client cannot tell a queued lease from one waiting for its start; the answer's
`gpu_tenancy_status` can). A cancelled lease is gone, as a deleted Blazar lease is.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpu_tenancy.domain.states import LeaseState as S


@dataclass(frozen=True)
class BlazarStatus:
    lease: str          # PENDING, STARTING, ACTIVE, TERMINATING, TERMINATED, ERROR
    reservation: str    # pending, active, deleted, error
    started: bool       # the start_lease event is done
    ended: bool         # the end_lease event is done


PENDING = BlazarStatus("PENDING", "pending", False, False)
TERMINATED = BlazarStatus("TERMINATED", "deleted", True, True)

STATUS: dict[S, BlazarStatus | None] = {
    S.REQUESTED: PENDING,
    S.QUEUED: PENDING,
    S.SCHEDULED: PENDING,
    S.PROVISIONING: BlazarStatus("STARTING", "pending", False, False),
    S.ACTIVE: BlazarStatus("ACTIVE", "active", True, False),
    S.ENDING: BlazarStatus("TERMINATING", "active", True, False),
    # parked by an idle rule: Blazar has no word for it; its reservation still stands
    S.PARKING: BlazarStatus("ACTIVE", "active", True, False),
    S.PARKED: BlazarStatus("ACTIVE", "active", True, False),
    S.RESUMING: BlazarStatus("ACTIVE", "active", True, False),
    S.ENDED: TERMINATED,
    S.PREEMPTED: TERMINATED,
    S.EXPIRED: BlazarStatus("TERMINATED", "deleted", False, True),   # it never started
    S.FAILED: BlazarStatus("ERROR", "error", True, True),
    S.CANCELLED: None,      # deleted: Blazar shows it no more
}


def blazar_status(state: S) -> BlazarStatus | None:
    """How Blazar shows a lease in `state`; None: not at all (it was deleted)."""
    return STATUS[state]

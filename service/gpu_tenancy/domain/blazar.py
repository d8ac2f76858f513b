"""How a gpu-tenancy lease reads in Blazar's terms (its lease statuses, reservation
statuses, event names and date format), for the notifications that follow Blazar's
(engine/notifications.py). Pure: names and mappings only."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

from gpu_tenancy.domain.states import LeaseState

S = LeaseState

# Blazar's lease statuses (blazar/status.py): gpu-tenancy's waiting states are its PENDING
LEASE_STATUS: dict[LeaseState, str] = {
    S.REQUESTED: "PENDING", S.QUEUED: "PENDING", S.SCHEDULED: "PENDING",
    S.PROVISIONING: "STARTING", S.ACTIVE: "ACTIVE", S.ENDING: "TERMINATING",
    S.PARKING: "ACTIVE", S.PARKED: "ACTIVE", S.RESUMING: "ACTIVE",
    S.ENDED: "TERMINATED", S.CANCELLED: "TERMINATED", S.EXPIRED: "TERMINATED", S.PREEMPTED: "TERMINATED",
    S.FAILED: "ERROR",
}
# a reservation's: pending, active, deleted, error
RESERVATION_STATUS: dict[str, str] = {"PENDING": "pending", "STARTING": "pending", "ACTIVE": "active",
                                      "TERMINATING": "active", "TERMINATED": "deleted", "ERROR": "error"}
# a lease event's: UNDONE, IN_PROGRESS, DONE, ERROR
START_LEASE, END_LEASE, BEFORE_END_LEASE = "start_lease", "end_lease", "before_end_lease"
FLAVOR_INSTANCE = "flavor:instance"
_RESERVATIONS = uuid.UUID("5b0f7e0e-8f7d-4c55-9a43-6c4f1e0f2a21")   # names a lease's one reservation id


def lease_status(state: str) -> str:
    return LEASE_STATUS[LeaseState(state)]


def reservation_id(lease_id: str) -> str:
    """A lease has one reservation (flavor:instance); its id is derived from the lease's, so it
    is the same in every notice and answer without being stored."""
    return str(uuid.uuid5(_RESERVATIONS, lease_id))


def date(epoch: int | None) -> str | None:
    """Blazar's date format in its answers and notifications (oslo's to_primitive of a datetime)."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")


def event_status(event: str, state: str) -> str:
    """Whether the lease's start_lease / end_lease / before_end_lease event has happened yet."""
    s = LeaseState(state)
    if s is S.FAILED:
        return "ERROR"
    if s in (S.CANCELLED, S.EXPIRED):
        return "UNDONE"
    if event == START_LEASE:
        return "DONE" if s in (S.ACTIVE, S.ENDING, S.ENDED, S.PREEMPTED, S.PARKING, S.PARKED, S.RESUMING) else \
            "IN_PROGRESS" if s is S.PROVISIONING else "UNDONE"
    if event == END_LEASE:
        return "DONE" if s in (S.ENDED, S.PREEMPTED) else "IN_PROGRESS" if s is S.ENDING else "UNDONE"
    return "DONE" if s in (S.ENDING, S.ENDED, S.PREEMPTED) else "UNDONE"

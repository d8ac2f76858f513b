"""A gpu-tenancy lease in Blazar's words: its lease status, its one reservation's
status and id, its events' statuses, its dates and Blazar's date form. The one
place both Blazar faces read them from: the Blazar-compatible API (api/blazar/)
and the bus notifications that follow Blazar's (engine/notifications.py), so a
lease reads the same in an answer and in a notice (tests/functional/
test_blazar_agreement.py). Pure: names, mappings and arithmetic only.

Blazar's leases are PENDING until their start, then STARTING, ACTIVE, TERMINATING,
TERMINATED, or ERROR. gpu-tenancy's waiting and scheduled leases are all PENDING (an
old client cannot tell a queued lease from one waiting for its start; the answer's
`gpu_tenancy_status` can). A cancelled lease is gone from the API, as a deleted
Blazar lease is; its lease.delete notice calls it TERMINATED.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from gpu_tenancy.domain.states import LeaseState as S

START_LEASE, END_LEASE, BEFORE_END_LEASE = "start_lease", "end_lease", "before_end_lease"
FLAVOR_INSTANCE = "flavor:instance"
# oslo's PERFECT_TIME_FORMAT: how Blazar's answers and notices write a time (blazarclient parses it back)
SHOWN = "%Y-%m-%dT%H:%M:%S.%f"
# the namespace of the derived ids (a fixed random uuid: the ids mean nothing outside Blazar's faces)
IDS = uuid.UUID("0c1f5c8e-3d0b-4b8e-9a51-6f3b2a7d9e41")
UNDONE, IN_PROGRESS, DONE, ERROR = "UNDONE", "IN_PROGRESS", "DONE", "ERROR"


@dataclass(frozen=True)
class BlazarStatus:
    lease: str          # PENDING, STARTING, ACTIVE, TERMINATING, TERMINATED, ERROR
    reservation: str    # pending, active, deleted, error
    start_lease: str    # the events': UNDONE, IN_PROGRESS, DONE, ERROR
    end_lease: str
    before_end_lease: str
    shown: bool = True  # the API lists it (a cancelled lease is deleted)

    def event(self, kind: str) -> str:
        return {START_LEASE: self.start_lease, END_LEASE: self.end_lease,
                BEFORE_END_LEASE: self.before_end_lease}[kind]


PENDING = BlazarStatus("PENDING", "pending", UNDONE, UNDONE, UNDONE)
TERMINATED = BlazarStatus("TERMINATED", "deleted", DONE, DONE, DONE)
NEVER_RAN = BlazarStatus("TERMINATED", "deleted", UNDONE, UNDONE, UNDONE)

# every state has its words (a new state fails the tests until it is given them)
STATUS: dict[S, BlazarStatus] = {
    S.REQUESTED: PENDING,
    S.QUEUED: PENDING,
    S.SCHEDULED: PENDING,
    S.PROVISIONING: BlazarStatus("STARTING", "pending", IN_PROGRESS, UNDONE, UNDONE),
    S.ACTIVE: BlazarStatus("ACTIVE", "active", DONE, UNDONE, UNDONE),
    S.ENDING: BlazarStatus("TERMINATING", "active", DONE, IN_PROGRESS, DONE),
    # parked by an idle rule: Blazar has no word for it; its reservation still stands
    S.PARKING: BlazarStatus("ACTIVE", "active", DONE, UNDONE, UNDONE),
    S.PARKED: BlazarStatus("ACTIVE", "active", DONE, UNDONE, UNDONE),
    S.RESUMING: BlazarStatus("ACTIVE", "active", DONE, UNDONE, UNDONE),
    S.ENDED: TERMINATED,
    S.PREEMPTED: TERMINATED,
    S.EXPIRED: NEVER_RAN,                       # its window passed before it could start
    S.CANCELLED: BlazarStatus("TERMINATED", "deleted", UNDONE, UNDONE, UNDONE, shown=False),
    S.FAILED: BlazarStatus("ERROR", "error", ERROR, ERROR, ERROR),
}


def blazar_status(state: S | str) -> BlazarStatus:
    return STATUS[S(state)]


def reservation_id(lease_id: str) -> str:
    """A lease has one reservation (flavor:instance); its id is derived from the lease's, so it
    is the same in every answer and notice without being stored."""
    return str(uuid.uuid5(IDS, "reservation:" + lease_id))


def event_id(lease_id: str, kind: str) -> str:
    return str(uuid.uuid5(IDS, f"{kind}:{lease_id}"))


def window(start_at: datetime | None, end_at: datetime | None, waiting_start: datetime,
           duration: int) -> tuple[int, int]:
    """The start and end Blazar shows, in epoch seconds, of stored times (naive UTC): the
    committed ones, else (waiting) `waiting_start` (the queue's ETA or the asked start) and
    the duration after it."""
    if start_at is not None and end_at is not None:
        return epoch(start_at), epoch(end_at)
    start = epoch(waiting_start)
    return start, start + duration


def epoch(value: datetime) -> int:
    return int(value.replace(tzinfo=timezone.utc).timestamp()) if value.tzinfo is None else int(value.timestamp())


def date(value: datetime | int | None) -> str | None:
    """Blazar's date form (oslo's to_primitive of a datetime), of epoch seconds or a stored
    time (naive UTC)."""
    if value is None:
        return None
    if isinstance(value, int):
        value = datetime.fromtimestamp(value, tz=timezone.utc)
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.strftime(SHOWN)

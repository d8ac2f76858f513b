"""The lease state machine: the one place that says which transitions are legal."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class LeaseState(enum.StrEnum):
    REQUESTED = "requested"
    QUEUED = "queued"
    SCHEDULED = "scheduled"        # GPUs committed in the ledger, start time set
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    ENDING = "ending"
    PARKING = "parking"            # idle: its VMs being shelved, the GPUs still held
    PARKED = "parked"              # VMs shelved, GPUs given back; a resume slot held in the ledger
    RESUMING = "resuming"          # its VMs being unshelved on the slot's hosts
    ENDED = "ended"
    CANCELLED = "cancelled"
    FAILED = "failed"
    EXPIRED = "expired"
    PREEMPTED = "preempted"


S = LeaseState

TRANSITIONS: dict[LeaseState, frozenset[LeaseState]] = {
    S.REQUESTED: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    # queued -> failed: a lease that can never be planned (engine/limits.py)
    S.QUEUED: frozenset({S.SCHEDULED, S.CANCELLED, S.EXPIRED, S.FAILED}),
    # scheduled -> queued: its host went away, so it waits again
    S.SCHEDULED: frozenset({S.PROVISIONING, S.CANCELLED, S.QUEUED}),
    # provisioning -> scheduled/queued: a host-level fault, retried on another host
    S.PROVISIONING: frozenset({S.ACTIVE, S.FAILED, S.ENDING, S.SCHEDULED, S.QUEUED}),
    # active -> scheduled/queued: its host went down; re-placed ahead of the queue
    # active -> parking: an idle rule's `then: park` (engine/park.py)
    S.ACTIVE: frozenset({S.ENDING, S.PREEMPTED, S.SCHEDULED, S.QUEUED, S.PARKING}),
    # parking -> ending: DELETE, its end, or a shelve the cloud refused
    S.PARKING: frozenset({S.PARKED, S.ENDING}),
    # parked -> resuming: the held slot came, or the tenant asked; parked -> ending: DELETE or its end
    S.PARKED: frozenset({S.RESUMING, S.ENDING}),
    # resuming -> ending: DELETE, or an unshelve that failed past its class's retries;
    # resuming -> parked: an unshelve refused with its VMs still shelved, its slot moved elsewhere;
    # resuming -> scheduled/queued: a VM lost off the shelf (ERROR, its host down): booted again elsewhere;
    # resuming -> provisioning: some of its VMs lost, the others unshelved: the lost ones booted again alone
    S.RESUMING: frozenset({S.ACTIVE, S.ENDING, S.PARKED, S.SCHEDULED, S.QUEUED, S.PROVISIONING}),
    # ending -> preempted: a lease ended early with notice (reclaimed or preempted), VMs now deleted
    S.ENDING: frozenset({S.ENDED, S.FAILED, S.PREEMPTED}),
    S.ENDED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
    S.EXPIRED: frozenset(),
    S.PREEMPTED: frozenset(),
}

WAITING = frozenset({S.REQUESTED, S.QUEUED})
# hold GPUs in the ledger now (or, scheduled, from their start)
HOLDING = frozenset({S.SCHEDULED, S.PROVISIONING, S.ACTIVE, S.ENDING, S.PARKING, S.RESUMING})
# whose allocations the planner takes as holds: a parked lease's are its held resume slot
RESERVING = HOLDING | {S.PARKED}
FINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)


class IllegalTransition(ValueError):
    def __init__(self, current: LeaseState, target: LeaseState):
        super().__init__(f"a lease that is {current.value} cannot become {target.value}")
        self.current, self.target = current, target


@dataclass(frozen=True)
class Transition:
    """A recorded change of state: the event row's content."""
    lease_id: str
    from_state: LeaseState | None
    to_state: LeaseState
    at: int
    actor: str
    reason: str


def transition(lease_id: str, current: LeaseState | None, target: LeaseState,
               *, at: int, actor: str, reason: str) -> Transition:
    """Check a transition and describe it; raises IllegalTransition."""
    if current is None:
        if target is not S.REQUESTED:
            raise IllegalTransition(S.REQUESTED, target)
    elif target not in TRANSITIONS[current]:
        raise IllegalTransition(current, target)
    return Transition(lease_id, current, target, at, actor, reason)

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
    S.ACTIVE: frozenset({S.ENDING, S.PREEMPTED, S.SCHEDULED, S.QUEUED}),
    # ending -> preempted: a lease ended early with notice (reclaimed or preempted), VMs now deleted
    S.ENDING: frozenset({S.ENDED, S.FAILED, S.PREEMPTED}),
    S.ENDED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
    S.EXPIRED: frozenset(),
    S.PREEMPTED: frozenset(),
}

WAITING = frozenset({S.REQUESTED, S.QUEUED})
HOLDING = frozenset({S.SCHEDULED, S.PROVISIONING, S.ACTIVE, S.ENDING})  # hold GPUs in the ledger
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

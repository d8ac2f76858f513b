"""How a lease reads in Blazar's terms: every state has Blazar's status, and its
start_lease / end_lease events are done in the order a lease lives them."""
from __future__ import annotations

from gpu_tenancy.domain import blazar
from gpu_tenancy.domain.states import TRANSITIONS, LeaseState

BLAZAR_STATUSES = {"PENDING", "STARTING", "ACTIVE", "TERMINATING", "TERMINATED", "ERROR"}
ORDER = {"UNDONE": 0, "IN_PROGRESS": 1, "DONE": 2}


def test_every_state_has_a_blazar_status_and_a_reservation_status():
    for state in LeaseState:
        status = blazar.lease_status(state.value)
        assert status in BLAZAR_STATUSES
        assert blazar.RESERVATION_STATUS[status] in {"pending", "active", "deleted", "error"}


def test_events_never_go_back_along_a_legal_transition():
    """Along every legal transition but a re-placement (back to waiting), an event that was
    done stays done; end_lease is never done before start_lease."""
    waiting = {LeaseState.REQUESTED, LeaseState.QUEUED, LeaseState.SCHEDULED}
    for source, targets in TRANSITIONS.items():
        for target in targets:
            if target in waiting or target is LeaseState.FAILED:
                continue
            for event in (blazar.START_LEASE, blazar.END_LEASE):
                before, after = blazar.event_status(event, source.value), blazar.event_status(event, target.value)
                if before in ORDER and after in ORDER and target not in (LeaseState.CANCELLED, LeaseState.EXPIRED):
                    assert ORDER[after] >= ORDER[before], (event, source, target)
    for state in LeaseState:
        if blazar.event_status(blazar.END_LEASE, state.value) == "DONE":
            assert blazar.event_status(blazar.START_LEASE, state.value) == "DONE"


def test_dates_and_reservation_ids():
    assert blazar.date(1_796_112_000) == "2026-12-01T08:00:00.000000"
    assert blazar.date(None) is None
    assert blazar.reservation_id("a") == blazar.reservation_id("a") != blazar.reservation_id("b")

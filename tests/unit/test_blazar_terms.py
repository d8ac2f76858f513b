"""domain/blazar.py: every gpu-tenancy state has its Blazar words, they agree with the
state machine, and a lease's events are done in the order it lives them."""
from __future__ import annotations

from datetime import datetime

import pytest

from gpu_tenancy.domain import blazar
from gpu_tenancy.domain.states import FINAL, HOLDING, TRANSITIONS, WAITING, LeaseState as S

LEASE = {"PENDING", "STARTING", "ACTIVE", "TERMINATING", "TERMINATED", "ERROR"}   # blazar/status.py
RESERVATION = {"pending", "active", "deleted", "error"}
EVENTS = (blazar.START_LEASE, blazar.END_LEASE, blazar.BEFORE_END_LEASE)
ORDER = {"UNDONE": 0, "IN_PROGRESS": 1, "DONE": 2}


@pytest.mark.parametrize("state", list(S))
def test_every_state_is_said_in_blazar_s_words_and_only_a_cancelled_one_is_hidden(state):
    shown = blazar.blazar_status(state)
    assert shown.lease in LEASE and shown.reservation in RESERVATION
    assert {shown.event(kind) for kind in EVENTS} <= set(ORDER) | {"ERROR"}
    assert shown.shown == (state is not S.CANCELLED)    # deleted, as a deleted Blazar lease is gone
    assert shown.start_lease == "UNDONE" or shown.lease != "PENDING"
    if state in WAITING or state is S.SCHEDULED:
        assert shown == blazar.PENDING
    if state in FINAL:
        assert shown.lease in ("TERMINATED", "ERROR") and "IN_PROGRESS" not in {shown.event(k) for k in EVENTS}
    if state in HOLDING - {S.SCHEDULED, S.PROVISIONING}:
        assert shown.start_lease == "DONE" and shown.end_lease != "DONE"


def test_events_never_go_back_along_a_legal_transition():
    """Along every legal transition but a re-placement (back to waiting, or a resume's lost VMs
    booted again: resuming -> provisioning, starting again) or a failure, an event that was done
    stays done; end_lease is never done before start_lease."""
    for source, targets in TRANSITIONS.items():
        for target in targets:
            if target in WAITING | {S.SCHEDULED, S.FAILED, S.CANCELLED, S.EXPIRED} or (source, target) == (
                    S.RESUMING, S.PROVISIONING):
                continue
            for event in EVENTS:
                before, after = blazar.blazar_status(source).event(event), blazar.blazar_status(target).event(event)
                assert ORDER[after] >= ORDER[before], (event, source, target)
    for state in S:
        shown = blazar.blazar_status(state)
        if shown.end_lease == "DONE":
            assert shown.start_lease == "DONE"


def test_dates_windows_and_derived_ids():
    assert blazar.date(1_796_112_000) == "2026-12-01T08:00:00.000000"
    assert blazar.date(datetime(2026, 12, 1, 8, 0, 0, 250)) == "2026-12-01T08:00:00.000250"
    assert blazar.date(None) is None
    assert blazar.reservation_id("a") == blazar.reservation_id("a") != blazar.reservation_id("b")
    assert blazar.event_id("a", blazar.START_LEASE) != blazar.event_id("a", blazar.END_LEASE)
    start, end = datetime(2026, 12, 1, 8), datetime(2026, 12, 2, 8)
    assert blazar.window(start, end, datetime(2027, 1, 1), 60) == (1_796_112_000, 1_796_198_400)
    assert blazar.window(None, None, start, 60) == (1_796_112_000, 1_796_112_060)

"""domain/blazar_status.py: every gpu-tenancy state has its Blazar words, and they agree
with the state machine (a final state's events are done, a waiting one's are not)."""
from __future__ import annotations

from gpu_tenancy.domain.blazar_status import blazar_status
from gpu_tenancy.domain.states import FINAL, HOLDING, WAITING, LeaseState as S

LEASE = {"PENDING", "STARTING", "ACTIVE", "TERMINATING", "TERMINATED", "ERROR"}   # blazar/status.py
RESERVATION = {"pending", "active", "deleted", "error"}


def test_every_state_is_shown_in_blazar_s_words_except_a_cancelled_one():
    for state in S:
        shown = blazar_status(state)
        if state is S.CANCELLED:
            assert shown is None      # deleted, as a deleted Blazar lease is gone
            continue
        assert shown is not None and shown.lease in LEASE and shown.reservation in RESERVATION
        assert not shown.started or shown.lease != "PENDING"
        if state in WAITING or state is S.SCHEDULED:
            assert (shown.lease, shown.started, shown.ended) == ("PENDING", False, False)
        if state in FINAL:
            assert shown.ended and shown.lease in ("TERMINATED", "ERROR")
        if state in HOLDING - {S.SCHEDULED, S.PROVISIONING}:
            assert shown.started and not shown.ended

import pytest

from gpu_tenancy.domain.states import FINAL, IllegalTransition, LeaseState as S, transition


@pytest.mark.parametrize("cur,nxt", [
    (None, S.REQUESTED), (S.REQUESTED, S.QUEUED), (S.QUEUED, S.SCHEDULED), (S.SCHEDULED, S.PROVISIONING),
    (S.PROVISIONING, S.ACTIVE), (S.ACTIVE, S.ENDING), (S.ENDING, S.ENDED), (S.QUEUED, S.EXPIRED),
    (S.SCHEDULED, S.QUEUED), (S.PROVISIONING, S.SCHEDULED), (S.ACTIVE, S.PREEMPTED),
    (S.ACTIVE, S.SCHEDULED), (S.ACTIVE, S.QUEUED), (S.PROVISIONING, S.QUEUED)])
def test_legal(cur, nxt):
    tr = transition("l1", cur, nxt, at=5, actor="engine", reason="test")
    assert (tr.from_state, tr.to_state, tr.at) == (cur, nxt, 5)


@pytest.mark.parametrize("cur,nxt", [
    (None, S.QUEUED), (S.REQUESTED, S.ACTIVE), (S.QUEUED, S.ACTIVE), (S.ACTIVE, S.REQUESTED),
    (S.ENDED, S.ACTIVE), (S.CANCELLED, S.QUEUED), (S.EXPIRED, S.SCHEDULED), (S.ACTIVE, S.CANCELLED)])
def test_illegal(cur, nxt):
    with pytest.raises(IllegalTransition):
        transition("l1", cur, nxt, at=5, actor="engine", reason="test")


def test_final_states_have_no_exit():
    assert FINAL == {S.ENDED, S.CANCELLED, S.FAILED, S.EXPIRED, S.PREEMPTED}

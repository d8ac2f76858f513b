import re
from pathlib import Path

import pytest

from gpu_tenancy.domain.states import FINAL, TRANSITIONS, IllegalTransition, LeaseState as S, transition


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


def test_docs_design_lists_every_legal_transition_and_no_other():
    """docs/design.md's table of states (and its sentence of those legal but unused) is what a
    contributor reads: it left out `queued -> failed` (engine/limits.py) and `provisioning ->
    failed`, and told `active -> preempted` as the way a lease ends at its notice (it goes
    through `ending`; nothing takes that one)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    section = text.split("## Lease states", 1)[1].split("\n## ", 1)[0]
    told = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("from", "(new)") and "---" not in cells[0]:
            told |= {(S(a.strip()), S(b.strip())) for a in cells[0].split(",") for b in cells[1].split(",")}
    unused_line = next(p for p in section.split("\n\n") if "legal but nothing takes" in p)
    unused = {(S(a), S(b)) for a, b in re.findall(r"`(\w+) -> (\w+)`", unused_line)}
    legal = {(a, b) for a, nxt in TRANSITIONS.items() for b in nxt}
    assert told | unused == legal, (sorted(legal - told - unused), sorted((told | unused) - legal))

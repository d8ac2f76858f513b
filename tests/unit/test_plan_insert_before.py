"""engine/plan_insert.py: call_before. The offers of a fitted create are tried before the
ledger lock is taken, and again under it only when fits committed meanwhile (or a replan)
changed the plan the lease is fitted into: always on that plan, never twice for nothing."""
from __future__ import annotations

from gpu_tenancy.engine.plan_insert import Snapshot, call_before


def test_before_sees_the_plan_the_lease_is_fitted_into_once():
    calls = []

    def before(session, book, row):
        calls.append((book, snapshot.inserted))
    book = object()
    snapshot = Snapshot(generation=1, inserted=5, made_at=0, allowance=0, book=book)  # type: ignore[arg-type]
    seen = call_before(before, None, snapshot, None, None)          # before the lock
    assert call_before(before, None, snapshot, None, seen) == seen  # nothing committed meanwhile
    assert calls == [(book, 5)]
    snapshot.inserted = 7                                           # two fits read under the lock
    seen = call_before(before, None, snapshot, None, seen)
    other = object()
    snapshot.book = other                                           # built again: a replan meanwhile
    call_before(before, None, snapshot, None, seen)
    assert calls == [(book, 5), (book, 7), (other, 7)]
    assert call_before(None, None, snapshot, None, None) == (other, 7)

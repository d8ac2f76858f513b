"""engine/plan_insert.py: Recent, the ledger's last fits kept in its lock row. A claim takes the
fits committed while it waited from it only when every one of them is there: fits numbered one
after another are kept (the last KEPT of them); a gap in the numbers (a claim that fitted
nothing, a process that keeps none) starts them again."""
from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from types import SimpleNamespace

from gpu_tenancy.engine.plan_insert import NAMES, Recent


def lease(k: int) -> SimpleNamespace:
    at = datetime(2026, 1, 1, 0, k % 60)
    return SimpleNamespace(id=f"l{k}", project_id="p", gpu_model="A100", gpus_per_vm=1 + k % 8, instances=1,
                           duration=3600, earliest_start=at, latest_start=None, created_at=at, priority=0,
                           name=f"n{k}", preemptible=False, arrival=k, start_at=at, end_at=at,
                           planned_hosts=[f"h{k}"], borrowing=False)


def test_a_claim_takes_from_recent_only_the_fits_it_needs_and_only_when_all_are_there():
    rng = random.Random(7)
    recent, fitted = Recent(), {}   # every fit made, by its number
    taken = 0
    for seq in range(1, 400):
        if rng.random() < 0.1:   # a claim that fitted nothing, or a fit not kept: a gap
            if rng.random() < 0.5:
                fitted[seq] = None   # made by a process that keeps none (the rows have it)
            continue
        for after in range(max(0, seq - 25), seq):   # a plan caught up to `after` claims number seq
            rows = recent.since(after, seq - 1)
            if rows is not None:
                taken += 1
                assert [r.plan_seq for r in rows] == [k for k in range(after + 1, seq) if k in fitted], (seq, after)
                assert all(fitted[r.plan_seq] is not None and r.id == fitted[r.plan_seq] for r in rows)
        fitted[seq] = f"l{seq}"
        recent = Recent.of(recent.with_fit(seq, lease(seq)))   # written with the fit
        assert len(recent.fits) <= Recent.KEPT
    assert taken > 1000   # most claims take them from here
    assert Recent.of(None).since(0, 0) is None and Recent.of(None).since(5, 9) is None


def test_a_kept_fit_reads_as_its_row_does():
    row = Recent.of(Recent().with_fit(3, lease(3))).since(2, 3)
    assert row is not None and len(row) == 1
    r = row[0]
    assert (r.id, r.plan_seq, r.gpus_per_vm, r.arrival, json.loads(r.planned_hosts), r.latest_start) == (
        "l3", 3, 4, 3, ["h3"], None)
    assert set(r) == set(NAMES) and r.start_at == r.earliest_start == int(datetime(2026, 1, 1, 0, 3, tzinfo=timezone.utc).timestamp())

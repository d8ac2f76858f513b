"""How the CLI's table shows a waiting lease's queue place (osc/columns.py)."""
from __future__ import annotations

from gpu_tenancy.osc.columns import QueueColumn


def test_the_queue_reads_position_eta_start_by_and_reasons():
    queue = {"position": 2, "eta": "2026-12-01T14:00:00Z", "start_by": "2026-12-01T15:30:00Z",
             "reasons": [{"code": "order", "message": "1 lease goes first"}]}
    assert QueueColumn(queue).human_readable() == (
        "position 2, eta 2026-12-01T14:00:00Z, start by 2026-12-01T15:30:00Z\n1 lease goes first")
    assert QueueColumn({**queue, "start_by": None, "eta": None, "reasons": []}).human_readable() == (
        "position 2, eta unknown")
    assert QueueColumn(queue).machine_readable() == queue and QueueColumn(None).human_readable() == ""


def test_a_start_by_past_the_eta_says_why():
    basis = {"source": "project", "samples": 60, "message": "95 % of this project's last 60 leases that waited "
                                                            "started no later than their ETA plus 1.5 times the wait"}
    queue = {"position": 2, "eta": "2026-12-01T14:00:00Z", "start_by": "2026-12-01T15:30:00Z",
             "start_by_basis": basis, "reasons": [{"code": "order", "message": "1 lease goes first"}]}
    assert QueueColumn(queue).human_readable().splitlines() == [
        "position 2, eta 2026-12-01T14:00:00Z, start by 2026-12-01T15:30:00Z",
        f"start by, why: {basis['message']}", "1 lease goes first"]
    on_time = {**queue, "start_by": queue["eta"]}   # nothing to explain
    assert "why" not in QueueColumn(on_time).human_readable()

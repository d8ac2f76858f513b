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

"""GPU-hours per project and GPU model, from the ledger. An allocation counts
for the time it really held GPUs: the engine cuts the allocations of leases
that end early, and nothing after `now` counts."""
from __future__ import annotations

from collections import defaultdict

from sqlalchemy.orm import Session

from gpu_tenancy.domain.calendar import overlap
from gpu_tenancy.domain.states import HOLDING, LeaseState
from gpu_tenancy.engine.capacity import holds_between

S = LeaseState
# leases whose allocations were (or are being) used; cancelled and expired ones never held GPUs
USED_GPUS = HOLDING | {S.ENDED, S.FAILED, S.PREEMPTED}


def gpu_hours(session: Session, start: int, end: int, now: int,
              project_id: str | None = None) -> dict[str, dict[str, float]]:
    """{project: {gpu model: GPU-hours}} over [start, min(end, now)); one project or all (None)."""
    until = min(end, now)
    seconds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if until > start:
        for hold in holds_between(session, start, until, USED_GPUS, project_id):
            seconds[hold.project_id][hold.gpu_model] += hold.gpus * overlap(hold.start, hold.end, start, until)
    if project_id is not None:
        seconds.setdefault(project_id, defaultdict(int))
    return {project: {model: round(s / 3600, 4) for model, s in sorted(models.items())}
            for project, models in sorted(seconds.items())}

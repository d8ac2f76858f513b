"""Fair-share standing (Slurm's sshare) from exactly what the planner reads: the same
quotas, holds and decayed usage (ledger.load_inputs, with the planner settings'
half-life), ranked with the planner's own score (domain/standing.py), and its queued charge
when the settings turn it on."""
from __future__ import annotations

from sqlalchemy.orm import Session

from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.standing import Standing, standing
from gpu_tenancy.engine import ledger


def standings(session: Session, now: int, settings: PlannerSettings, gpu_model: str | None = None) -> list[Standing]:
    """Per project and GPU model (one model, or every one), ranked per model."""
    inputs = ledger.load_inputs(session, now, settings)
    rows = standing(now, inputs.quotas, inputs.holds, inputs.usage, inputs.waiting, settings.queued_charge,
                    settings.queued_charge_spares_gpus)
    return [row for row in rows if gpu_model is None or row.gpu_model == gpu_model]

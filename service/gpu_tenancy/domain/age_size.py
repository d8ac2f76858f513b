"""Age x size in the planner's fair-share order (PlannerSettings.age_size_gpu_hours).

Fair share alone keeps putting a heavy tenant's big lease behind every lighter tenant's
new one, so on a busy cluster it can wait for weeks. With this rule on, a waiting lease's
fair-share score (lower goes first) halves for every `age_size_gpu_hours` GPU-hours it has
waited (its GPUs times the hours since it began to wait), as Slurm's multifactor priority
adds an age factor, here scaled by the lease's size and taken in the score's own scale: a
big lease overtakes the light tenants' new leases in hours, a 1-GPU lease barely moves, and
since the score only falls while a lease waits, no later arrival of its project and size goes
before it again (a bigger one may: it ages faster). A project whose score is 0 (no recent use)
is not overtaken at all, and after about 1,075 halvings a score reaches 0.0 and ties go by age. Pure and deterministic; the order still depends on the lease alone.
"""
from __future__ import annotations

import math

from .model import LeaseRequest

__all__ = ["aged_score", "waited_gpu_hours"]


def waited_gpu_hours(lr: LeaseRequest, now: int) -> float:
    """Its GPUs times the hours it has waited (from when it was asked, or its earliest start)."""
    since = max(lr.created_at, lr.earliest_start)
    return max(1, lr.gpus_per_vm * lr.instances) * max(0, now - since) / 3600


def aged_score(score: float, lr: LeaseRequest, now: int, gpu_hours: float | None) -> float:
    """The fair-share score `score` of lr's project, halved per `gpu_hours` GPU-hours lr has
    waited; `score` itself when the rule is off (None) or the score is 0 or infinite."""
    if gpu_hours is None or score <= 0 or math.isinf(score):
        return score
    if gpu_hours <= 0:   # no scale: any wait at all puts it before every positive score
        return 0.0 if now > max(lr.created_at, lr.earliest_start) else score
    halvings: float = waited_gpu_hours(lr, now) / gpu_hours
    return score * math.pow(2.0, -halvings)

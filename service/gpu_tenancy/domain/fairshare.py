"""Fair share: decayed recent GPU-hours per (project, gpu_model).

A GPU used for one hour `age` seconds ago counts 2 ** (-age / half_life)
GPU-hours. A usage record covering [start, end) contributes the integral of
that weight over the part of the interval up to `now` (an end beyond now, e.g.
a running lease, counts only up to now).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UsageRecord:
    project_id: str
    gpu_model: str
    gpus: int
    start: int
    end: int


def _fields(r: Any) -> tuple[str, str, int, int, int]:
    if hasattr(r, "project_id"):
        return r.project_id, r.gpu_model, r.gpus, r.start, r.end
    p, m, g, s, e = r
    return p, m, g, s, e


def decayed_gpu_hours(records: Iterable[Any], now: int, half_life: int) -> dict[tuple[str, str], float]:
    """Sum of decayed GPU-hours per (project_id, gpu_model).

    records: UsageRecord-like objects or plain (project_id, gpu_model, gpus,
    start, end) tuples. half_life in seconds (<= 0: no decay)."""
    out: dict[tuple[str, str], float] = {}
    lam = math.log(2) / half_life if half_life > 0 else 0.0
    for r in records:
        p, m, g, s, e = _fields(r)
        if e > now:
            e = now
        if e <= s or g <= 0:
            continue
        if lam == 0.0:
            secs = float(e - s)
        else:
            # integral of exp(-lam*(now-t)) dt over [s, e]
            secs = (math.exp(-lam * (now - e)) - math.exp(-lam * (now - s))) / lam
        key = (p, m)
        out[key] = out.get(key, 0.0) + g * secs / 3600.0
    return out


def share_score(usage: Mapping[tuple[str, str], float] | None, project_id: str, gpu_model: str,
                weight: float) -> float:
    """Usage per unit of weight (lower goes first)."""
    u = usage.get((project_id, gpu_model), 0.0) if usage else 0.0
    if weight <= 0:
        return math.inf if u > 0 else 0.0
    return u / weight

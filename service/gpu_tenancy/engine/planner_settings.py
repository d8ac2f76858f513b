"""The planner settings the service runs with, taken from its configuration.

The fair-share half-life travels with each call (the API passes it); the
rest is set once when the app or the engine starts (configure) and is the
planner's default until then."""
from __future__ import annotations

from dataclasses import replace

from gpu_tenancy.domain.planner import PlannerSettings

_configured = PlannerSettings()
_release_floor = 0


def configure(config) -> None:
    """Take the planner's options from a gpu_tenancy.config.Config."""
    global _configured, _release_floor
    _release_floor = config.release_allowance_seconds
    _configured = PlannerSettings(wait_bound=config.planner_wait_bound_seconds,
                                  wait_bound_gpu_hours=config.planner_wait_bound_gpu_hours,
                                  wait_bound_leases=config.planner_wait_bound_leases)


def settings(half_life: int) -> PlannerSettings:
    return replace(_configured, fairshare_half_life=half_life)


def release_floor() -> int:
    """The operator's least release allowance, seconds (engine/held.py)."""
    return _release_floor

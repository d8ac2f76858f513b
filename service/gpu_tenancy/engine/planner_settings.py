"""The planner settings the service runs with, taken from its configuration.

Built once where the configuration is read (api/runtime.py's Runtime, the engine's
Lifecycle) and passed explicitly from there to every plan: nothing here is global,
so two apps in one process each plan with their own."""
from __future__ import annotations

from gpu_tenancy.config import Config
from gpu_tenancy.domain.planner import PlannerSettings


def from_config(config: Config) -> PlannerSettings:
    """The planner's options from a gpu_tenancy.config.Config."""
    return PlannerSettings(fairshare_half_life=config.fairshare_half_life_seconds,
                           wait_bound=config.planner_wait_bound_seconds,
                           wait_bound_gpu_hours=config.planner_wait_bound_gpu_hours,
                           wait_bound_leases=config.planner_wait_bound_leases,
                           keep_etas=config.planner_keep_etas,
                           age_size_gpu_hours=config.planner_age_size_gpu_hours,
                           queued_charge=config.planner_queued_charge,
                           queued_charge_spares_gpus=config.planner_queued_charge_spares_gpus,
                           empty_together=config.planner_empty_together,
                           release_floor=config.release_allowance_seconds,
                           boot_timeout=config.boot_timeout_seconds)

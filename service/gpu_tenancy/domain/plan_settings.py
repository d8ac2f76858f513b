"""The planner's options (PlannerSettings) and their defaults: the wait bound, the fair-share
half-life, the release allowance, keep_etas and age x size. Pure; see domain/planner.py for what
each does to a plan."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlannerSettings", "DEFAULT_WAIT_BOUND", "DEFAULT_WAIT_BOUND_GPU_HOURS", "DEFAULT_WAIT_BOUND_LEASES",
           "DEFAULT_KEEP_ETAS", "DEFAULT_AGE_SIZE_GPU_HOURS",
           "DEFAULT_QUEUED_CHARGE", "DEFAULT_QUEUED_CHARGE_SPARES_GPUS", "DEFAULT_EMPTY_TOGETHER"]


# Off by default: on Philly at 80 % and 95 % load a 4 h bound kept the P90 wait of
# the big leases at EASY backfill's but made the P50 and P90 of all leases worse
# than EASY's (docs/performance.md); an operator may trade that way.
DEFAULT_WAIT_BOUND: int | None = None
DEFAULT_WAIT_BOUND_GPU_HOURS: float | None = None
DEFAULT_WAIT_BOUND_LEASES: int | None = None
# Off by default: on the Philly tuning slice it kept 97-100 % of ETAs but took the P50 wait from
# 0.56-0.87x EASY's to 0.77-1.14x (docs/performance.md, "keep_etas")
DEFAULT_KEEP_ETAS = False
# Off by default: see docs/performance.md, "Age x size"
DEFAULT_AGE_SIZE_GPU_HOURS: float | None = None
# Off by default: see docs/performance.md, "Queued charge"
DEFAULT_QUEUED_CHARGE: float | None = None
DEFAULT_QUEUED_CHARGE_SPARES_GPUS: int | None = None
# Off by default: see docs/performance.md, "Hosts that empty together"
DEFAULT_EMPTY_TOGETHER = False


@dataclass(frozen=True)
class PlannerSettings:
    # seconds in which past use counts half as much in fair share (the engine decays usage with it:
    # engine/ledger.py, fairshare.decayed_gpu_hours)
    fairshare_half_life: int = 7 * 24 * 3600
    # a lease that has waited this long (seconds) goes before fair share; None: never
    wait_bound: int | None = DEFAULT_WAIT_BOUND
    # ... or that has waited this many GPU-hours (GPUs x hours waited); None: never
    wait_bound_gpu_hours: float | None = DEFAULT_WAIT_BOUND_GPU_HOURS
    # at most this many leases past the bound go before fair share at a time, per GPU model: those that
    # reached it first (the rest wait in fair-share order until their turn); None: every one
    wait_bound_leases: int | None = DEFAULT_WAIT_BOUND_LEASES
    # seconds from a lease's end until the cloud has released its GPUs (domain/held.py): every
    # lease planned here is held that much longer, so the next lease's ETA includes it
    release_allowance: int = 0
    # the operator's least release allowance: the engine's measured one is never below it (engine/held.py)
    release_floor: int = 0
    # seconds a lease may take to start (boot, or resume) before it fails and is tried again: one still
    # starting past its end holds its GPUs till then (engine/ledger.py: load_allocations); None: no deadline
    boot_timeout: int | None = None
    # a lease's first ETA is kept against fair share: once a plan would break it, the lease goes by it
    keep_etas: bool = DEFAULT_KEEP_ETAS
    # a waiting lease's fair-share score halves for every this many GPU-hours it has waited
    # (domain/age_size.py); None: fair share alone
    age_size_gpu_hours: float | None = DEFAULT_AGE_SIZE_GPU_HOURS
    # a waiting lease's fair-share score counts this times the GPU-hours its project's holds keep from
    # now and its waiting leases ahead of it will use (domain/queued_charge.py); None: fair share alone
    queued_charge: float | None = DEFAULT_QUEUED_CHARGE
    # ... but not for leases of this many GPUs per VM or more (the big leases it is for: a whole
    # host drained, not a gang of small VMs); None: every lease
    queued_charge_spares_gpus: int | None = DEFAULT_QUEUED_CHARGE_SPARES_GPUS
    # a one-VM lease goes, among the hosts where it starts earliest, where the fewest GPUs are left
    # free once it ends (capacity.empty_together_key), not by best fit at its start alone
    empty_together: bool = DEFAULT_EMPTY_TOGETHER

    @property
    def bounded(self) -> bool:
        return self.wait_bound is not None or self.wait_bound_gpu_hours is not None

    @property
    def fits_one_by_one(self) -> bool:
        """A new lease can be fitted into a plan (domain/plan_insert.py): the order of the planned
        leases stands while it is fitted (no wait bound or age x size moving them as time passes,
        no keep_etas guarding them by what a whole plan finds)."""
        return not self.bounded and not self.keep_etas and self.age_size_gpu_hours is None

    @property
    def aged(self) -> bool:
        """The order moves with time as leases wait (age x size) or with the other leases waiting
        (the queued charge): only a whole plan knows it."""
        return self.age_size_gpu_hours is not None or self.queued_charge is not None

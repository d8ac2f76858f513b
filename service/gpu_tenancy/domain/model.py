"""Plain data the planner reads and writes.

Times are integer seconds since the epoch (UTC); durations are seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Host:
    """A compute node with GPUs of one model."""
    name: str
    gpu_model: str
    gpus: int
    enabled: bool = True          # disabled or down hosts get nothing new
    aggregate: str | None = None  # gang VMs prefer hosts of one aggregate


@dataclass(frozen=True, slots=True)
class Hold:
    """GPUs already committed on a host: a VM of an active or scheduled lease."""
    lease_id: str
    project_id: str
    host: str
    gpu_model: str
    gpus: int
    start: int
    end: int
    borrowing: bool = False
    preemptible: bool = False     # runs on idle capacity outside quota; ended whenever needed
    priority: int = 0             # the lease's: reclaim takes the lowest first
    allowance: int = 0            # `end` is the planned end plus this (the cloud's release time)
    # its lease's place in the order of asking (created_at, then the arrival sequence): of two
    # borrowers started the same second, the one asked for later is reclaimed first
    asked: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """A project's limits for one GPU model."""
    project_id: str
    gpu_model: str
    gpus: int                        # nominal: GPUs held at any instant
    borrow_gpus: int = 0             # more it may hold on capacity left idle
    max_duration: int | None = None  # longest lease, seconds; None = no limit
    weight: float = 1.0              # fair-share weight


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """A lease waiting for GPUs (queued, not yet holding any)."""
    lease_id: str
    project_id: str
    gpu_model: str
    gpus_per_vm: int
    instances: int                # more than one: a gang, all start together
    duration: int
    earliest_start: int
    latest_start: int | None
    created_at: int
    priority: int = 0             # higher goes first
    name: str = ""
    preemptible: bool = False     # any size, outside quota, only where idle; ended when needed
    arrival: int = 0              # the order it was asked in (a monotonic sequence): ties of created_at
    first_eta: int | None = None  # the ETA it was told when it was first planned (None: not told one yet)
    guarded: bool = False         # a plan once broke that ETA: it goes by it from then on (keep_etas)


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a lease waits, in words a user can act on. `code` is one of
    quota, capacity, priority, fairshare, order, duration, latest_start,
    unplaceable, borrowing, preemptible; reclaim (the engine's: GPUs freed for it with notice);
    provisional (a create fitted it into the plan out of order: domain/plan_insert.py)."""
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and when a lease will run: one host name per VM (a host may
    appear more than once when it holds several of the gang's VMs)."""
    start: int
    end: int
    hosts: tuple[str, ...]


@dataclass(slots=True)
class PlannedLease:
    lease_id: str
    position: int                    # 1-based rank among leases waiting for the same GPU model
    placement: Placement | None      # None: no slot (see reasons)
    reasons: list[Reason] = field(default_factory=list)
    borrowing: bool = False          # runs beyond nominal quota on idle capacity

    @property
    def eta(self) -> int | None:
        return self.placement.start if self.placement else None


@dataclass(slots=True)
class Plan:
    now: int
    leases: dict[str, PlannedLease]  # in planner order
    # keep_etas: the waiting leases that go by the ETA they were told (those given plus those this
    # plan found it would otherwise start late); the caller keeps them for the next plan
    guarded: frozenset[str] = frozenset()

    def startable(self) -> list[PlannedLease]:
        """Leases whose planned start has come."""
        return [p for p in self.leases.values()
                if p.placement is not None and p.placement.start <= self.now]

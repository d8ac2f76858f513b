"""A history replayed on this cloud's hosts, with the service's planner and the engine's
semantics: planner_sched.GpuTenancy (the scheduler bench/engine_replay.py checks against
the real engine) on event_loop.simulate, with each lease's own GPU model, priority and
asked start, and fair share per project and model as the engine keeps it."""
from __future__ import annotations

from collections.abc import Callable

from gpu_tenancy.domain.model import Host, LeaseRequest
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.reclaim import ReclaimSettings
from gpu_tenancy.whatif.cluster_model import Cluster
from gpu_tenancy.whatif.event_loop import Outcome, simulate
from gpu_tenancy.whatif.history import History, Lease
from gpu_tenancy.whatif.planner_sched import GpuTenancy


class CloudCluster(Cluster):
    """The cloud's hosts in service, each with its own GPU count (and model: the planner
    places each lease on hosts of its model; the cluster only counts free GPUs)."""

    def __init__(self, hosts: tuple[Host, ...]):
        super().__init__(len(hosts), max((h.gpus for h in hosts), default=0))
        self.names = [h.name for h in hosts]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.free = [h.gpus for h in hosts]
        self.sizes = list(self.free)

    @property
    def capacity(self) -> int:
        return sum(self.sizes)

    def give(self, hosts, g: int, now: int) -> None:
        super().give(hosts, g, now)
        for h in hosts:
            assert self.free[h] <= self.sizes[h]


class CloudTenancy(GpuTenancy):
    def __init__(self, history: History, settings: PlannerSettings, hosts: tuple[Host, ...],
                 reclaim: ReclaimSettings = ReclaimSettings()):
        # arrivals told a full plan's ETA: the replay's fits into a kept plan (planner_sched) are
        # made for the trace replay's one GPU model, not for a cloud's several
        super().__init__(history.quotas, settings.fairshare_half_life, settings=settings, insert_min_waiting=None,
                         reclaim=reclaim)
        self.hosts = list(hosts)

    def request(self, job: Lease) -> LeaseRequest:   # type: ignore[override]
        return LeaseRequest(job.jid, job.tenant, job.gpu_model, job.gpus_per_vm, job.vms, job.duration,
                            job.start_asked, None, job.arrival, priority=job.priority, arrival=job.seq)

    def usage_key(self, job: Lease) -> tuple[str, str]:   # type: ignore[override]
        return job.tenant, job.gpu_model


def replay(history: History, settings: PlannerSettings,
           on_time: Callable[[int], None] | None = None, reclaim: ReclaimSettings = ReclaimSettings()) -> Outcome:
    """Each lease's start (leases that never start, because no host or quota can take them,
    are left out of out.start), the ETA its first plan gave it, and the leases a reclaim ended
    early (out.ended_early: a borrowing lease, for one within its project's quota)."""
    hosts = tuple(h for h in history.hosts if h.enabled)
    return simulate(list(history.leases), CloudCluster(hosts),
                    CloudTenancy(history, settings, hosts, reclaim), on_time=on_time, partial=True)

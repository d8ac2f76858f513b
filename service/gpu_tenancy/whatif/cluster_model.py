"""The cluster every scheduler in the replay shares: hosts of 8 GPUs, a VM's
GPUs on one host, a gang's VMs all at once; plus the offered-load sizing and
the tenants' quota shares."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

HOST_GPUS = 8


class Cluster:
    """Free GPUs per host. place() never over-commits (it raises instead), and
    every start and release is logged per host for the tests and the plots."""

    def __init__(self, n_hosts: int, host_gpus: int = HOST_GPUS):
        self.host_gpus = host_gpus
        self.names = [f"h{i:04d}" for i in range(n_hosts)]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.free = [host_gpus] * n_hosts
        self.log: list[tuple[int, int, int]] = []   # (time, host index, +gpus taken / -gpus released)

    @property
    def capacity(self) -> int:
        return self.host_gpus * len(self.free)

    @property
    def free_total(self) -> int:
        return sum(self.free)

    def choose(self, g: int, n: int, free: Sequence[int] | None = None) -> list[int] | None:
        """Best fit: each VM on the host with the fewest free GPUs that still
        holds it (whole blocks stay free for big VMs); None if it does not fit."""
        free = list(self.free if free is None else free)
        out = []
        for _ in range(n):
            best = -1
            for i, f in enumerate(free):
                if f >= g and (best < 0 or f < free[best]):
                    best = i
                    if f == g:
                        break
            if best < 0:
                return None
            free[best] -= g
            out.append(best)
        return out

    def take(self, hosts: Iterable[int], g: int, now: int) -> None:
        for h in hosts:
            if self.free[h] < g:
                raise AssertionError(f"over-commit: host {self.names[h]} has {self.free[h]} free, asked {g}")
            self.free[h] -= g
            self.log.append((now, h, g))

    def give(self, hosts: Iterable[int], g: int, now: int) -> None:
        for h in hosts:
            self.free[h] += g
            assert self.free[h] <= self.host_gpus
            self.log.append((now, h, -g))

    def usable_by(self, g: int, n: int) -> int:
        """Free GPUs a waiting job of n VMs x g GPUs could use right now."""
        vms = sum(f // g for f in self.free)
        return 0 if vms < n else g * vms


def demand(jobs, window: tuple[int, int]) -> float:
    """GPU-seconds the jobs arriving in the window would use inside it if each
    started on arrival: a job running past the window's end counts only up to
    it, so that a slice of a trace (--days) is sized by what it asks of that
    slice, not by work that would spill over."""
    a, b = window
    return float(sum(j.gpus * (min(b, j.arrival + j.runtime) - j.arrival) for j in jobs if a <= j.arrival < b))


def offered_load(jobs, n_gpus: int, window: tuple[int, int]) -> float:
    """demand / (GPUs x window length): the mean fraction of the cluster busy
    if nobody ever waited."""
    a, b = window
    return demand(jobs, window) / (n_gpus * (b - a))


def hosts_for_load(jobs, load: float, window: tuple[int, int], host_gpus: int = HOST_GPUS) -> int:
    """Hosts of host_gpus GPUs that make the offered load closest to `load`
    (never fewer than the largest job needs)."""
    a, b = window
    work = demand(jobs, window)
    n = max(1, round(work / (load * host_gpus * (b - a))))
    biggest = max((j.vms if j.vms > 1 else 1) for j in jobs)
    return max(n, biggest)


def window_of(jobs) -> tuple[int, int]:
    return jobs[0].arrival, jobs[-1].arrival + 1


def quota_shares(tenants: Iterable[str], sizes: Mapping[str, float], default: float | None = None) -> dict[str, float]:
    """Each tenant's share of the cluster, proportional to its size (Philly VC
    nodes); tenants without a size get the smallest size there is."""
    tenants = sorted(set(tenants))
    floor = default if default is not None else min(sizes.values())
    raw = {t: float(sizes.get(t, floor)) for t in tenants}
    total = sum(raw.values())
    return {t: v / total for t, v in raw.items()}


def nominal_gpus(shares: Mapping[str, float], capacity: int) -> dict[str, int]:
    return {t: max(1, math.floor(s * capacity)) for t, s in shares.items()}

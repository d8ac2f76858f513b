"""The baselines the replay compares gpu-tenancy with, on the same loop and
cluster model. None of them knows quotas: every tenant may use the whole
cluster (see README: gpu-tenancy is run both with and without quotas).

- FIFO: jobs start in arrival order; the first that does not fit stops the queue.
- EASY backfill: FIFO, plus a reservation for the head of the queue at the
  earliest time it fits once running jobs end (their asked durations); a later
  job may start now if it fits and either ends by that time or leaves the
  head still fitting at that time (one reservation, Lifka 1995). Its only
  ETA is the head's reservation: a job that is the head when it is
  submitted (and cannot start) is told it; later jobs are told nothing.
- Refuse-when-busy (Blazar-like): a request that does not fit at once is
  refused; the user asks again every `retry` seconds until it fits.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict

from gpu_tenancy.whatif.event_loop import Scheduler
from gpu_tenancy.whatif.history import Lease


def _fits_fast(cluster, job, maxfree: int, whole: int) -> bool:
    if job.vms > 1:
        return whole >= job.vms
    return maxfree >= job.gpus_per_vm


class FIFO(Scheduler):
    name = "FIFO"

    def __init__(self):
        self.queue: OrderedDict[str, Lease] = OrderedDict()

    def submit(self, job, now):
        self.queue[job.jid] = job

    def oldest_waiting(self):
        return next(iter(self.queue.values()), None)

    def schedule(self, now, cluster, running):
        starts, free = [], list(cluster.free)
        while self.queue:
            job = next(iter(self.queue.values()))
            hosts = cluster.choose(job.gpus_per_vm, job.vms, free)
            if hosts is None:
                break
            for h in hosts:
                free[h] -= job.gpus_per_vm
            starts.append((job, hosts))
            del self.queue[job.jid]
        return starts, None


class EASY(FIFO):
    name = "EASY"

    def __init__(self):
        super().__init__()
        self.first_eta: dict[str, int] = {}

    def schedule(self, now, cluster, running):
        starts, _ = super().schedule(now, cluster, running)
        if not self.queue:
            return starts, None
        free = list(cluster.free)
        for job, hosts in starts:
            for h in hosts:
                free[h] -= job.gpus_per_vm
        head = next(iter(self.queue.values()))
        # the head's reservation: release running jobs by their asked end until it fits
        ends = sorted(
            [(st + jb.duration, hs, jb.gpus_per_vm) for jb, hs, st in running.values()]
            + [(now + jb.duration, hs, jb.gpus_per_vm) for jb, hs in starts])
        at_shadow = list(free)
        shadow, i = None, 0
        while i < len(ends):
            t = ends[i][0]
            while i < len(ends) and ends[i][0] == t:
                for h in ends[i][1]:
                    at_shadow[h] += ends[i][2]
                i += 1
            if cluster.choose(head.gpus_per_vm, head.vms, at_shadow) is not None:
                shadow = t
                break
        if shadow is None:   # cannot happen while the head fits an empty cluster
            raise AssertionError(f"EASY: head {head.jid} never fits")
        if head.arrival == now and head.jid not in self.first_eta:
            self.first_eta[head.jid] = shadow   # submitted as the head: its reservation is its ETA
        G = cluster.host_gpus
        chosen = []
        it = iter(self.queue.values())
        next(it)
        for job in it:
            maxfree = max(free)
            if maxfree == 0:
                break
            if not _fits_fast(cluster, job, maxfree, sum(1 for f in free if f == G)):
                continue
            hosts = cluster.choose(job.gpus_per_vm, job.vms, free)
            if now + job.duration > shadow:
                trial = list(at_shadow)
                for h in hosts:
                    trial[h] -= job.gpus_per_vm
                if cluster.choose(head.gpus_per_vm, head.vms, trial) is None:
                    continue   # would delay the head's reservation
                at_shadow = trial
            for h in hosts:
                free[h] -= job.gpus_per_vm
            chosen.append((job, hosts))
        for job, hosts in chosen:
            starts.append((job, hosts))
            del self.queue[job.jid]
        return starts, None


class RefuseRetry(Scheduler):
    """Blazar-like: no queue. A request that does not fit now is refused and asked again `retry` s later."""
    name = "refuse+retry"

    def __init__(self, retry: int = 600):
        self.retry = retry
        self.pending: OrderedDict[str, Lease] = OrderedDict()   # by arrival
        self.due: list = []                                       # (retry time, arrival, jid)
        self.new: list = []
        self.attempts = 0

    def submit(self, job, now):
        self.pending[job.jid] = job
        self.new.append(job)

    def oldest_waiting(self):
        return next(iter(self.pending.values()), None)

    def stats(self):
        return {"requests": self.attempts}

    def schedule(self, now, cluster, running):
        tries = [j for j in self.new]
        self.new = []
        while self.due and self.due[0][0] <= now:
            _, _, jid = heapq.heappop(self.due)
            tries.append(self.pending[jid])
        tries.sort(key=lambda j: (j.arrival, j.jid))
        starts, free = [], list(cluster.free)
        for job in tries:
            self.attempts += 1
            hosts = cluster.choose(job.gpus_per_vm, job.vms, free)
            if hosts is None:
                heapq.heappush(self.due, (now + self.retry, job.arrival, job.jid))
                continue
            for h in hosts:
                free[h] -= job.gpus_per_vm
            starts.append((job, hosts))
            del self.pending[job.jid]
        return starts, (self.due[0][0] if self.due else None)

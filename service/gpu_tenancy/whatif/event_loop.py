"""The replay's event loop, shared by every scheduler: arrivals, job ends and
the wake-ups a scheduler asks for, on virtual time (no sleeping).

Semantics are the engine's: at an instant, all jobs that end release their
GPUs first and the scheduler decides once; then each arrival is submitted
and the scheduler decides after each (the API replans on every new lease).
A job holds its GPUs from its start until its real end (start + runtime), or
until the earlier end a scheduler gave it (the engine's reclaim: take_cuts) unless it
calls that off (take_uncuts, taken first at each decision: a job called off and cut again there
ends at the new cut); a scheduler only sees the duration the lease asked for (Job.duration).
"""
from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_tenancy.whatif.cluster_model import Cluster

END, ARRIVE, WAKE = 0, 1, 2


@dataclass
class Outcome:
    name: str
    start: dict[str, int]                      # jid -> start time
    hosts: dict[str, list[int]]                # jid -> host index per VM
    cluster: Cluster
    frag_gpu_seconds: float = 0.0              # idle GPUs unusable by the oldest waiting job, integrated
    span: tuple[int, int] = (0, 0)
    wall_seconds: float = 0.0
    decisions: int = 0                         # schedule() calls
    extra: dict = field(default_factory=dict)  # scheduler-specific figures (plans run, ...)
    first_eta: dict[str, int] | None = None    # jid -> the ETA given when it was submitted (None: none given)
    ended_early: dict[str, int] = field(default_factory=dict)   # jid -> when a scheduler's cut ended it

    def end(self, job) -> int:
        """When a started job gave its GPUs back: its real end, or the earlier one a cut gave it."""
        return self.ended_early.get(job.jid, self.start[job.jid] + job.runtime)


class Scheduler:
    """What the loop needs from a scheduler. One that tells a waiting job when it
    will start sets first_eta to a dict and records there, jid -> start, the
    ETA it gave each job when the job was submitted (its decision right after)."""
    name = "scheduler"
    first_eta: dict[str, int] | None = None
    # set by the loop before each schedule(): another arrival comes at this instant
    arrivals_follow: bool = False
    # set by the loop before each schedule(): an arrival comes next at this instant (whatever this event is)
    arrival_next: bool = False

    def submit(self, job, now: int) -> None: ...
    def finished(self, job, now: int) -> None: ...
    def schedule(self, now: int, cluster: Cluster, running: dict) -> tuple[list, int | None]:
        """[(job, host indexes)] to start now, and the next time it wants to be asked (or None)."""
        raise NotImplementedError
    def oldest_waiting(self):
        """The waiting job that arrived first (None: nothing waits)."""
        raise NotImplementedError
    def take_cuts(self) -> list[tuple[str, int]]:
        """Running jobs to end earlier than their real end, decided since last asked: (jid, when)."""
        return []
    def take_uncuts(self) -> list[str]:
        """Running jobs whose cut is called off since last asked: they end at their real end again."""
        return []
    def stats(self) -> dict:
        return {}


def simulate(jobs, n_hosts: int | Cluster, sched: Scheduler, progress: float | None = None,
             on_time: Callable[[int], None] | None = None, partial: bool = False) -> Outcome:
    """Replay `jobs` on n_hosts hosts of 8 GPUs (or on the cluster given); with `progress`, print
    where the replay is every that many wall seconds; `on_time(t)` is called at each event (it may
    raise to stop the replay); with `partial`, jobs that never start are left out of the outcome's
    starts instead of failing the replay."""
    cluster = n_hosts if isinstance(n_hosts, Cluster) else Cluster(n_hosts)
    heap: list = [(j.arrival, ARRIVE, i, j) for i, j in enumerate(jobs)]
    heapq.heapify(heap)
    seq = len(jobs)
    wakes: set[int] = set()
    running: dict[str, tuple] = {}            # jid -> (job, hosts, start)
    ends: dict[str, int] = {}                 # jid -> when a running job ends (its END events at other times are void)

    def void(entry) -> bool:
        return entry[1] == END and ends.get(entry[3].jid) != entry[0]
    out = Outcome(sched.name, {}, {}, cluster)
    t_prev, frag_now = jobs[0].arrival if jobs else 0, 0
    wall0 = last = time.perf_counter()
    while heap:
        if progress and time.perf_counter() - last > progress:
            last = time.perf_counter()
            print(f"    {sched.name}: day {(t_prev - jobs[0].arrival) / 86400:.1f}, {len(out.start)} of "
                  f"{len(jobs)} started, {last - wall0:.0f} s wall", flush=True)
        entry = heapq.heappop(heap)
        if void(entry):
            continue   # the end of a job a cut ended earlier, or that ended before its cut
        t, kind, _, job = entry
        if on_time is not None:
            on_time(t)
        if t > t_prev:
            out.frag_gpu_seconds += frag_now * (t - t_prev)
            t_prev = t
        if kind == END:
            _, hosts, _ = running.pop(job.jid)
            del ends[job.jid]
            cluster.give(hosts, job.gpus_per_vm, t)
            sched.finished(job, t)
            while heap and void(heap[0]):
                heapq.heappop(heap)
            if heap and heap[0][0] == t and heap[0][1] == END:
                continue   # all ends of this instant first, then one decision
        elif kind == ARRIVE:
            sched.submit(job, t)
        else:
            wakes.discard(t)
        sched.arrival_next = bool(heap) and heap[0][0] == t and heap[0][1] == ARRIVE
        sched.arrivals_follow = kind == ARRIVE and sched.arrival_next
        starts, wake = sched.schedule(t, cluster, running)
        out.decisions += 1
        for sj, hosts in starts:
            cluster.take(hosts, sj.gpus_per_vm, t)
            running[sj.jid] = (sj, hosts, t)
            out.start[sj.jid], out.hosts[sj.jid] = t, list(hosts)
            seq += 1
            ends[sj.jid] = t + sj.runtime
            heapq.heappush(heap, (t + sj.runtime, END, seq, sj))
        # the call-offs first: a job called off and noticed again in this decision ends at the new
        # notice's end (a cut noticed and called off in one decision is never told: Reclaims.call_off)
        for jid in sched.take_uncuts():
            if jid in out.ended_early and jid in running:   # (a cut past its real end never took)
                del out.ended_early[jid]
                sj, _, st = running[jid]
                ends[jid] = st + sj.runtime   # the cut's END is void from now on
                seq += 1
                heapq.heappush(heap, (ends[jid], END, seq, sj))
        for jid, at in sched.take_cuts():
            if jid in running and t < at < ends[jid]:
                ends[jid] = out.ended_early[jid] = at
                seq += 1
                heapq.heappush(heap, (at, END, seq, running[jid][0]))
        if wake is not None and wake > t and wake not in wakes:
            wakes.add(wake)
            seq += 1
            heapq.heappush(heap, (wake, WAKE, seq, None))
        head = sched.oldest_waiting()
        frag_now = 0 if head is None else cluster.free_total - cluster.usable_by(head.gpus_per_vm, head.vms)
    out.wall_seconds = time.perf_counter() - wall0
    out.span = (jobs[0].arrival, t_prev) if jobs else (0, 0)
    out.extra = sched.stats()
    out.first_eta = sched.first_eta
    missing = [j.jid for j in jobs if j.jid not in out.start]
    if missing and not partial:
        raise AssertionError(f"{sched.name}: {len(missing)} jobs never started, e.g. {missing[:3]}")
    return out

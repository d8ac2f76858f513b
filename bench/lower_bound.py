"""A lower bound on the mean wait that no scheduler on this cluster can beat.

Relaxation ("fast single machine"): pool the cluster's C GPUs into one
machine of speed C, let jobs be preempted and split at will, and ignore
hosts and gangs. Job j is work g_j x p_j arriving at a_j. Any real schedule
(each job run at g_j GPUs for p_j seconds, non-preemptively, on hosts) can
be turned into a schedule of that machine in which every job completes no
later than it did (process, at every instant, the same total work, in order
of the real completion times). On one machine SRPT (shortest remaining
processing time first) minimises the sum of completion times. Hence, for
every scheduler,

    sum_j C_j  >=  sum_j C_j(SRPT on the fast machine),

and, since wait_j = C_j - a_j - p_j in the real schedule,

    mean wait  >=  max(0, (sum_j C_j(SRPT) - sum_j (a_j + p_j)) / n).

It is a bound on the *mean* wait only (a per-job bound valid for every
scheduler would be 0: any one job could be served first). It is weak at
moderate load: it charges no job for fragmentation, gangs or the fact that
a GPU cannot run faster than one GPU.
"""
from __future__ import annotations

import heapq


def srpt_completions(jobs, capacity: int) -> dict[str, float]:
    """Completion time of each job on one machine of speed `capacity`, SRPT."""
    order = sorted(jobs, key=lambda j: (j.arrival, j.jid))
    heap: list = []            # (remaining work, jid)
    done: dict[str, float] = {}
    t = float(order[0].arrival) if order else 0.0
    i = 0
    while i < len(order) or heap:
        if not heap:
            t = max(t, float(order[i].arrival))
        while i < len(order) and order[i].arrival <= t:
            heapq.heappush(heap, (float(order[i].gpu_time), order[i].jid))
            i += 1
        nxt = float(order[i].arrival) if i < len(order) else float("inf")
        rem, jid = heapq.heappop(heap)
        finish = t + rem / capacity
        if finish <= nxt:
            t = finish
            done[jid] = t
        else:
            heapq.heappush(heap, (rem - (nxt - t) * capacity, jid))
            t = nxt
    return done


def mean_wait_bound(jobs, capacity: int) -> float:
    if not jobs:
        return 0.0
    done = srpt_completions(jobs, capacity)
    total = sum(done[j.jid] - j.arrival - j.runtime for j in jobs)
    return max(0.0, total / len(jobs))

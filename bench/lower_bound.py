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

Sharper, and still valid: SRPT also has the fewest jobs in the system at
*every* instant (Schrage 1968), so for any real schedule N(t) >= N_SRPT(t);
and a job is in the system at least from its arrival to arrival + run time,
so N(t) >= N_run(t), the jobs that would be running had nobody waited.
Since sum_j (C_j - a_j) is the integral of N(t),

    mean wait  >=  (integral of max(N_SRPT(t), N_run(t)) dt - sum_j p_j) / n.

It is a bound on the *mean* wait only (a per-job bound valid for every
scheduler would be 0: any one job could be served first). It charges no job
for fragmentation, gangs or whole hosts, so it is weak at moderate load; it
bites in bursts, when more work has arrived than the cluster can have done.
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
    # +1 at each arrival, -1 at each SRPT completion (column 1) and at each arrival + run time (column 2)
    events = sorted([(float(j.arrival), 1, 1) for j in jobs] + [(done[j.jid], -1, 0) for j in jobs]
                    + [(float(j.arrival + j.runtime), 0, -1) for j in jobs])
    area, n_srpt, n_run, t_prev = 0.0, 0, 0, events[0][0]
    for t, d_srpt, d_run in events:
        area += max(n_srpt, n_run) * (t - t_prev)
        t_prev = t
        n_srpt += d_srpt
        n_run += d_run
    return max(0.0, (area - sum(j.runtime for j in jobs)) / len(jobs))

"""A brute-force reference for the planner's capacity and quota questions.

Same decision rules as gpu_tenancy.domain.planner (it plugs into plan() as a
backend, plan_run.Backend), but every question is answered by scanning every host at every
candidate time over raw interval lists: no profiles, no runs, no heaps. Used
as the oracle in tests/unit/test_planner_oracle.py and as the baseline column
of bench/planner_scale.py.
"""
from __future__ import annotations

from collections import defaultdict

from gpu_tenancy.domain.capacity import empty_together_key, select_gang_hosts
from gpu_tenancy.domain.plan_run import Backend
from gpu_tenancy.domain.profile import INF


def _used(intervals, a, b):
    """Max of the sum of intervals covering any instant of [a, b)."""
    pts = [a] + [s for (s, e, g) in intervals if a < s < b]
    best = 0
    for x in pts:
        u = 0
        for (s, e, g) in intervals:
            if s <= x < e:
                u += g
        if u > best:
            best = u
    return best


def _at(intervals, x):
    return sum(g for (s, e, g) in intervals if s <= x < e)


class NaiveIndex:
    def __init__(self, hosts, now, empty_together=False):
        self.now, self.empty_together = now, empty_together
        self.hosts = {h.name: h for h in sorted(hosts, key=lambda h: h.name) if h.gpus > 0}
        self.iv = defaultdict(list)

    def earliest(self, t, d, g, n=1):
        times = sorted({t} | {e for ivs in self.iv.values() for (s, e, _) in ivs if e > t})
        for T in times:
            cands = []
            total = 0
            for name, h in self.hosts.items():
                ivs = self.iv[name]
                j = (h.gpus - _used(ivs, T, T + d)) // g
                if j > 0:
                    total += j
                    cands.append((h.gpus - _at(ivs, T), name, h.aggregate, j))
            if total >= n:
                if n == 1 and self.empty_together:
                    after = min(T + d, INF - 1)   # a lease to forever: the last instant's free GPUs
                    return T, (min((empty_together_key(self.hosts[c[1]].gpus - _at(self.iv[c[1]], after), c[0],
                                                       self.hosts[c[1]].gpus), c[1]) for c in cands)[1],)
                if n == 1:
                    return T, (min(cands)[1],)
                return T, select_gang_hosts(cands, n)
        return None

    def reserve(self, host, a, b, g):
        self.iv[host].append((a, b, g))

    def largest_free_now(self):
        return max((h.gpus - _at(self.iv[n], self.now) for n, h in self.hosts.items()), default=0)


def naive_capacity(now, hosts, holds, empty_together=False):
    by_model = defaultdict(list)
    for h in hosts:
        if h.enabled:
            by_model[h.gpu_model].append(h)
    idx = {m: NaiveIndex(hs, now, empty_together) for m, hs in by_model.items()}
    for hd in holds:
        if hd.end > now and hd.gpus > 0 and hd.gpu_model in idx and hd.host in idx[hd.gpu_model].hosts:
            idx[hd.gpu_model].reserve(hd.host, max(hd.start, now), hd.end, hd.gpus)
    return idx


class NaiveQuota:
    def __init__(self, now, quotas, holds):
        self.now, self.quotas = now, quotas
        self.iv = defaultdict(list)
        self.planned = defaultdict(list)   # reservations that start after now
        for h in holds:
            if h.end > now and h.gpus > 0 and not h.preemptible:   # preemptible leases use no quota
                self.iv[(h.project_id, h.gpu_model)].append((max(h.start, now), h.end, h.gpus))

    def _nominal(self, p, m):
        q = self.quotas.get((p, m))
        return q.gpus if q else 0

    def earliest(self, p, m, t, d, need):
        ivs = self.iv[(p, m)]
        nom = self._nominal(p, m)
        for T in sorted({t} | {e for (s, e, g) in ivs if e > t}):
            if nom - _used(ivs, T, T + d) >= need:
                return T
        return None

    def min_remaining(self, p, m, a, b):
        return self._nominal(p, m) - _used(self.iv[(p, m)], a, b)

    def reserve(self, p, m, a, b, need):
        self.iv[(p, m)].append((a, b, need))
        if a > self.now:
            self.planned[(p, m)].append((a, b, need))

    def note_planned(self, reserved):
        for h in reserved:
            if h.start > self.now and h.end > h.start and h.gpus > 0 and not h.preemptible:
                self.planned[(h.project_id, h.gpu_model)].append((h.start, h.end, h.gpus))

    def overtakes(self, p, m, a, b, need):
        planned, held = self.planned[(p, m)], self.iv[(p, m)]
        instants = {a} | {x for (s, e, g) in planned + held for x in (s, e) if a < x < b}
        return any(_used(planned, x, x + 1) > 0 and self._nominal(p, m) - _used(held, x, x + 1) < need
                   for x in instants)


NAIVE = Backend(capacity=naive_capacity, quota=NaiveQuota)

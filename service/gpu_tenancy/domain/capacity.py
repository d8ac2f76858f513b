"""Free-GPU profiles over time and the index the planner uses to find slots.

A :class:`StepProfile` is a step function of time from an origin (``now``) to
infinity, kept as two parallel sorted lists: ``times[i]`` is where segment i
starts and ``vals[i]`` its value until ``times[i+1]`` (the last segment runs
forever). It serves both as a host's free GPUs and as a project's remaining
quota.

:class:`ModelIndex` answers "earliest start >= t at which a VM of g GPUs (or a
gang of N of them) fits for d seconds on one of these hosts, and on which
host" without scanning every host. For every host and every g a lease has asked
for it keeps the *runs* (host_runs.py): maximal intervals during which the
host has >= g GPUs free. Runs are kept in heaps per (g, length class) ordered
by (run start, free GPUs at the start, host name); the length class is log2
of the run length, so a query for duration d only looks at classes that can
hold d, and all runs of a longer class fit as soon as they start. Entries are
invalidated lazily: an entry is live only while its run is still one of the
host's current runs. A reservation updates only what its window touched.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress

from .model import Hold, Host
from .free_levels import FreeLevels, indexed_segments
from .host_runs import HostState
from .idle_hosts import IdleHosts
from .profile import INF, NCLS, StepProfile, length_class


FLOOR_HOSTS = 128   # hosts of one model from which the search keeps start floors (StartFloor)
# hosts of one model from which the free levels are kept: below it "who fits at t" reads every
# host, which costs less than keeping every segment indexed through each reservation (the trace
# replay's 25-50 hosts spent two fifths of its plans' time on that upkeep)
LEVELS_HOSTS = 64


class ModelIndex:
    """Enabled hosts of one GPU model, with the run heaps."""

    def __init__(self, gpu_model: str, hosts: Iterable[Host], origin: int,
                 holds: Mapping[str, Iterable[tuple[int, int, int]]] | None = None, empty_together: bool = False):
        """holds: as in apply_holds, each host's profile built with the host (in bulk: no
        profile made twice). empty_together: one VM's host chosen by empty_together_host."""
        self.gpu_model = gpu_model
        self.origin = origin
        self.empty_together = empty_together
        self.hosts: dict[str, HostState] = {}
        for h in sorted(hosts, key=lambda h: h.name):
            if h.gpus > 0:
                spans = holds.get(h.name) if holds is not None else None
                self.hosts[h.name] = HostState(h, origin, None if spans is None else
                                               StepProfile.of_spans(origin, h.gpus, spans))
        self.max_gpus = max((h.gpus for h in self.hosts.values()), default=0)
        # heaps[g][c]: sorted lists of entries (start, free_at_start, host_name, end); a g's
        # classes are made by _track (a plan asks about a few g only)
        self.heaps: list[list[list[tuple[int, int, str, int]]]] = [[] for _ in range(self.max_gpus + 1)]
        # free-now histogram for "largest free block now"
        self.now_count = [0] * (self.max_gpus + 1)
        # hosts entirely free from their idle_from on (filled by build())
        self.idle = IdleHosts(())
        # every other profile segment, by free value: "who has v free at t" (None: few hosts, read them all)
        self.levels = FreeLevels(self.max_gpus) if len(self.hosts) >= LEVELS_HOSTS else None
        self.tracked: list[int] = []    # the g whose runs are kept, ascending
        # floors[g]: what earlier questions about one VM of g GPUs proved about the next ones;
        # kept only where the hosts are many (about 20 % less CPU per plan at 300-1,000 hosts,
        # none at 100; at 30-50 hosts, the replay's, their upkeep cost more than they saved)
        self.floors = ([StartFloor() for _ in range(self.max_gpus + 1)]
                       if len(self.hosts) >= FLOOR_HOSTS else [])
        self._built = False

    # -- building -----------------------------------------------------
    def apply_hold(self, host: str, start: int, end: int, gpus: int) -> None:
        """Subtract a hold before build() (no run bookkeeping)."""
        hs = self.hosts.get(host)
        if hs is not None:
            hs.prof.add(start, end, -gpus)

    def apply_holds(self, by_host: Mapping[str, Iterable[tuple[int, int, int]]]) -> None:
        """Before build(), on hosts with no hold yet: each host's holds as (start, end, -gpus),
        its profile built at once."""
        for name, spans in by_host.items():
            hs = self.hosts.get(name)
            if hs is not None:
                hs.prof = StepProfile.of_spans(self.origin, hs.gpus, spans)

    def build(self) -> None:
        levels = self.levels
        now_count, top = self.now_count, self.max_gpus
        for hs in self.hosts.values():
            name = hs.name
            vals = hs.prof.vals
            hs.idle_from = hs.prof.times[-1] if vals[-1] >= hs.gpus else INF   # compute_idle_from, inline
            if levels is not None:
                for seg in indexed_segments(hs.prof, hs.gpus, self.origin, INF):
                    levels.lists[seg[2]][length_class(seg[1] - seg[0])].append((seg[0], name, seg[1]))
            v = vals[0]
            now_count[0 if v < 0 else (top if v > top else v)] += 1   # _clamp, inline
        if levels is not None:
            levels.sort()
        self.idle = IdleHosts((hs.gpus, hs.name, hs.idle_from) for hs in self.hosts.values())
        self._built = True

    def _track(self, g: int) -> None:
        """Start keeping the g-runs of every host (on the first question
        about g: most g are never asked, and their runs cost every reserve)."""
        heap_g: list[list[tuple[int, int, str, int]]] = [[] for _ in range(NCLS)]
        self.heaps[g] = heap_g
        top = NCLS - 1
        for hs in self.hosts.values():
            if hs.gpus >= g:
                name = hs.name
                for (s, e, f) in hs.track(g):
                    c = ((e - s) >> 6).bit_length()   # length_class, inline: runs are never empty
                    heap_g[c if c < NCLS else top].append((s, f, name, e))
        for L in heap_g:
            if len(L) > 1:
                L.sort()
        self.tracked.append(g)
        self.tracked.sort()

    def _clamp(self, v: int) -> int:
        return 0 if v < 0 else (self.max_gpus if v > self.max_gpus else v)

    # -- updates ------------------------------------------------------
    def reserve(self, host: str, start: int, end: int, gpus: int) -> None:
        """Take `gpus` on `host` over [start, end) and update only what that
        window touched: the free levels of its segments, and for each g the
        runs that meet it (the rest of the host's runs stay as they are)."""
        hs = self.hosts[host]
        prof = hs.prof
        lo = start if start > self.origin else self.origin   # add() clips to the origin
        if end <= lo or gpus == 0:
            return
        times, vals = prof.times, prof.vals
        before_now = vals[0]
        k = bisect_right(times, lo) - 1
        # free just before lo (0 at the origin): a g-run holding the window
        # and g up to this started before lo, and keeps its ends and its start
        left = vals[k] if times[k] < lo else (vals[k - 1] if k > 0 else 0)
        span = vals[k:bisect_left(times, end, k)] if end < INF else vals[k:]   # the values on [lo, end)
        least_before, most_before = min(span), max(span)
        G, name = hs.gpus, hs.name
        levels = self.levels
        if levels is not None:
            old_segs = indexed_segments(prof, G, lo, end)
            prof.add(start, end, -gpus)
            levels.replace(name, old_segs, indexed_segments(prof, G, lo, end))
        else:
            prof.add(start, end, -gpus)
        after_now = vals[0]
        if before_now != after_now:
            self.now_count[self._clamp(before_now)] -= 1
            self.now_count[self._clamp(after_now)] += 1
        idle = times[-1] if vals[-1] >= G else INF
        if idle != hs.idle_from:
            self.idle.set_idle_from(name, idle)
            hs.idle_from = idle
        # g above the most free in the window: no run meets it
        top = G if G < most_before else most_before
        least_after = least_before - gpus
        heaps = self.heaps
        for g in self.tracked:
            if g > top:
                break
            if g <= least_after and g <= left:
                continue
            added = hs.after_reserve(g, lo, end, least_after)
            if added:   # the entries of dropped runs die lazily
                heap_g = heaps[g]
                for (s, e, f) in added:
                    c = ((e - s) >> 6).bit_length()   # length_class, inline: it runs for every new run
                    insort(heap_g[c if c < NCLS else NCLS - 1], (s, f, name, e))

    def overcommitted(self, host: str) -> bool:
        """Whether the host's holds take more GPUs than it has at some instant."""
        return min(self.hosts[host].prof.vals) < 0

    def largest_free_now(self) -> int:
        for f in range(self.max_gpus, -1, -1):
            if self.now_count[f]:
                return f
        return 0

    # -- queries ------------------------------------------------------
    def earliest(self, t: int, duration: int, gpus: int, instances: int = 1
                 ) -> tuple[int, tuple[str, ...]] | None:
        """Earliest start >= t where `instances` VMs of `gpus` GPUs fit for
        `duration`, and the hosts chosen (one per VM)."""
        if gpus <= 0 or gpus > self.max_gpus:
            return None
        if gpus not in self.tracked:
            self._track(gpus)
        if instances == 1:
            one = self._earliest_one(t, duration, gpus)
            if one is not None and self.empty_together:
                return one[0], (self._empty_together_host(one[0], duration, gpus),)
            return one
        return self._earliest_gang(t, duration, gpus, instances)

    def _empty_together_host(self, s: int, d: int, g: int) -> str:
        """Among the hosts where g GPUs are free all over [s, s+d), the least (free once the lease
        has ended, free at s, name): empty_together_host's rule, read from every host (the heaps
        are ordered for best fit; this index answers alone only where the compiled one is not built)."""
        return min((empty_together_key(hs.prof.value_at(s + d), hs.prof.value_at(s), hs.gpus), name)
                   for name, hs in self.hosts.items() if hs.gpus >= g and hs.prof.min_on(s, s + d) >= g)[1]

    def _earliest_one(self, t: int, d: int, g: int) -> tuple[int, tuple[str, ...]] | None:
        """First the hosts that fit right at t (after the origin, through
        the free levels); then runs starting after t, read per length class
        in (start, free, name) order: the first that holds d is the best of
        its list."""
        floor = self.floors[g] if self.floors else None
        lb = floor.bound(d) if floor is not None else -INF
        if lb >= INF:
            return None
        if lb > t:   # nothing fits before lb: no host fits at t, and every fit from t on starts a run at or after lb
            first: tuple[int] | None = (lb,)
        elif t > self.origin:
            fit = self._fit_at(t, d, g)
            if fit is not None:
                return t, (fit[1],)
            first = (t,)
        else:
            first = None   # at the origin every run starts at or after t
        hosts = self.hosts
        best: tuple[int, int, str] | None = None
        lists = self.heaps[g]
        # the longer classes first: each one's first live run holds d, and the
        # best of them bounds the scan of d's own class (most of its runs are
        # too short)
        cd = length_class(d)
        for c in (*compress(range(cd + 1, NCLS), lists[cd + 1:]), cd):   # skipping empty classes in C
            L = lists[c]
            i = bisect_left(L, first) if first else 0
            n = len(L)
            while i < n:
                ent = L[i]
                # (start, free, name) at or after the best: ent's 4-tuple compares as its first
                # three would (a longer tuple with the same first three is the greater)
                if best is not None and ent >= best:
                    break
                s, f, name, e = ent
                if (s, e, f) not in hosts[name].runs[g]:
                    del L[i]
                    n -= 1
                    continue
                if e - s >= d:
                    best = (s, f, name)
                    break
                i += 1
        if floor is not None and t == self.origin:
            floor.learn(d, INF if best is None else best[0])
        if best is None:
            return None
        return best[0], (best[2],)

    def _fit_at(self, t: int, d: int, g: int) -> tuple[int, str] | None:
        """Least (free at t, name) among hosts with >= g free all over
        [t, t+d). Free levels are tried upwards from g, so the hosts of
        higher levels are never looked at once a tighter one fits."""
        idle = self._idle_at(t, g)
        hosts = self.hosts
        after = (t, INF + 1)
        until = t + d
        levels = self.levels
        if levels is None:
            return self._fit_at_by_scan(t, until, g, idle)

        def fits(name: str, seg_end: int) -> bool:
            # t lies in one of the host's g-runs (it has >= g free at t): that run must last
            if seg_end >= until:
                return True
            runs = hosts[name].run_lists[g]
            return runs[bisect_right(runs, after) - 1][1] >= until

        for v in range(g, (idle[0] if idle else self.max_gpus) + 1):
            name = levels.least_name_at(v, t, fits)
            if name is not None:
                return (v, name) if idle is None or (v, name) < idle else idle
        return idle

    def _fit_at_by_scan(self, t: int, until: int, g: int, idle: tuple[int, str] | None) -> tuple[int, str] | None:
        """_fit_at without the free levels: every host whose g-run at t lasts to `until`."""
        best = idle
        after = (t, INF + 1)
        for name, hs in self.hosts.items():
            if hs.gpus < g:
                continue
            runs = hs.run_lists[g]
            i = bisect_right(runs, after) - 1
            if i < 0:
                continue
            s, e, _f = runs[i]
            if e < until or e <= t:   # (s <= t: the run found starts at or before t)
                continue
            v = hs.prof.value_at(t)
            cand = (v if v < hs.gpus else hs.gpus, name)
            if best is None or cand < best:
                best = cand
        return best

    def _idle_at(self, t: int, g: int) -> tuple[int, str] | None:
        """Least (gpus, name) among hosts of >= g GPUs entirely free from t on."""
        return self.idle.least_idle(t, g)

    def _open_at(self, g: int, c: int, T: int, d: int, active: dict[str, int]) -> int:
        """Add to `active` the hosts whose g-run of class c covers [T, T+d);
        return the first live run start after T in that list (INF: none)."""
        L = self.heaps[g][c]
        hosts = self.hosts
        i = bisect_left(L, (T + d - (64 << c) + 1,)) if c < NCLS - 1 else 0
        while i < len(L):
            s, f, name, e = L[i]
            if (s, e, f) not in hosts[name].runs[g]:
                del L[i]
                continue
            if s > T:
                return s
            if e - T >= d:
                active[name] = e
            i += 1
        return INF

    def _earliest_gang(self, t: int, d: int, g: int, n: int) -> tuple[int, tuple[str, ...]] | None:
        hosts = self.hosts
        classes = [c for c in range(length_class(d), NCLS) if self.heaps[g][c]]
        T = t
        while True:
            active: dict[str, int] = {}
            nxt = INF
            for c in classes:
                x = self._open_at(g, c, T, d, active)
                if x < nxt:
                    nxt = x
            cands = []
            total = 0
            for name in active:   # (order free: the choice sorts by unique keys)
                hs = hosts[name]
                most = hs.gpus // g
                # the profile read once for the three questions below (value_at, min_on and
                # next_break at T, inline: this runs for every host open at every T tried)
                times, vals = hs.prof.times, hs.prof.vals
                k = bisect_right(times, T)
                i = k - 1 if k > 0 else 0
                # its g-run holds [T, T+d): one VM fits; more only on a bigger host
                if most == 1:
                    j = 1
                else:
                    stop = bisect_right(times, T + d - 1) if T + d < INF else len(times)
                    j = min(vals[i:stop if stop > i else i + 1]) // g
                if j > 0:
                    total += j
                    cands.append((vals[i], name, hs.aggregate, j))
                if j < most and k < len(times) and times[k] < nxt:   # more VMs may fit past a breakpoint
                    nxt = times[k]
            if total >= n:
                return T, select_gang_hosts(cands, n)
            if nxt >= INF:
                return None
            T = nxt

    def fits_at(self, t: int, duration: int, gpus: int, instances: int = 1
                ) -> tuple[str, ...] | None:
        r = self.earliest(t, duration, gpus, instances)
        if r is not None and r[0] == t:
            return r[1]
        return None


class StartFloor:
    """Lower bounds on the earliest start of one VM of some g GPUs, learnt from the
    answers given so far in this plan. Free GPUs only go down as leases are reserved,
    and a longer lease fits nowhere a shorter one does not, so once the earliest start
    from the origin for duration d was S, no lease of duration >= d starts before S
    for the rest of the plan. Kept as a staircase: durations ascending, bounds strictly
    ascending (an entry that a shorter duration's bound covers is dropped)."""

    __slots__ = ("ds", "ss")

    def __init__(self) -> None:
        self.ds: list[int] = []
        self.ss: list[int] = []

    def bound(self, d: int) -> int:
        """No VM of duration d starts before this (-INF: nothing known)."""
        i = bisect_right(self.ds, d) - 1
        return self.ss[i] if i >= 0 else -INF

    def learn(self, d: int, start: int) -> None:
        """The earliest start from the origin for duration d is `start` (INF: never)."""
        ds, ss = self.ds, self.ss
        i = bisect_right(ds, d)
        if i and ss[i - 1] >= start:
            return
        j = i
        while j < len(ds) and ss[j] <= start:
            j += 1
        if i and ds[i - 1] == d:   # the same duration again: its bound rose
            i -= 1
        ds[i:j] = [d]
        ss[i:j] = [start]


def empty_together_key(free_after: int, free_at_start: int, gpus: int) -> tuple[int, int]:
    """How a one-VM lease's host is chosen among those where it starts earliest, when hosts are to
    empty together (PlannerSettings.empty_together): the fewest GPUs free once it ends (the host's
    other holds outlast it, so it lengthens no host's busy time), then the fewest free at its start
    (best fit), each within [0, gpus]. The default, best fit, reads the second alone."""
    return (min(max(free_after, 0), gpus), min(free_at_start, gpus))


def select_gang_hosts(cands: Sequence[tuple[int, str, str | None, int]], n: int) -> tuple[str, ...]:
    """Choose hosts for n VMs among candidates (free_at_start, name,
    aggregate, how_many_vms_fit), all able to start at the same time.

    Prefer one aggregate that can take the whole gang (the tightest: least
    total free, then name); within the chosen set fill the tightest hosts
    first (least free at the start, then name). The rule is shared with the
    reference planner so both choose the same hosts."""
    by_agg: dict[str, list[tuple[int, str, str | None, int]]] = {}
    for c in cands:
        if c[2] is not None:
            by_agg.setdefault(c[2], []).append(c)
    pool = list(cands)
    if n > 1 and by_agg:
        fitting = [(sum(c[0] for c in cs), agg, cs) for agg, cs in by_agg.items()
                   if sum(c[3] for c in cs) >= n]
        if fitting:
            fitting.sort(key=lambda x: (x[0], x[1]))
            pool = fitting[0][2]
    pool = sorted(pool, key=lambda c: (c[0], c[1]))
    out: list[str] = []
    for _free, name, _agg, j in pool:
        k = min(j, n - len(out))
        out.extend([name] * k)
        if len(out) >= n:
            break
    return tuple(out)


def can_ever_fit(hosts: Sequence[Host], gpu_model: str, gpus_per_vm: int, instances: int) -> bool:
    """Whether the enabled hosts of gpu_model could ever take this lease
    (each VM's GPUs on one host; all VMs of a gang at once)."""
    return can_ever_fit_on((h.gpus for h in hosts if h.enabled and h.gpu_model == gpu_model),
                           gpus_per_vm, instances)


def can_ever_fit_on(host_gpus: Iterable[int], gpus_per_vm: int, instances: int) -> bool:
    """can_ever_fit on hosts given by their GPU counts alone (a create reads no more: a Host
    each would be thousands of objects per request on a large cloud)."""
    if gpus_per_vm <= 0 or instances <= 0:
        return False
    total = 0
    for gpus in host_gpus:
        total += gpus // gpus_per_vm
        if total >= instances:
            return True
    return False


def largest_free_block(hosts: Sequence[Host], holds: Sequence[Hold], gpu_model: str, at: int) -> int:
    """Most GPUs free on one enabled host of gpu_model at instant `at`."""
    used: dict[str, int] = {}
    for h in holds:
        if h.start <= at < h.end:
            used[h.host] = used.get(h.host, 0) + h.gpus
    best = 0
    for host in hosts:
        if host.enabled and host.gpu_model == gpu_model:
            best = max(best, host.gpus - used.get(host.name, 0))
    return best

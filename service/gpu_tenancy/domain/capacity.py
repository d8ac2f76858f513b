"""Free-GPU profiles over time and the index the planner uses to find slots.

A :class:`StepProfile` is a step function of time from an origin (``now``) to
infinity, kept as two parallel sorted lists: ``times[i]`` is where segment i
starts and ``vals[i]`` its value until ``times[i+1]`` (the last segment runs
forever). It serves both as a host's free GPUs and as a project's remaining
quota.

:class:`ModelIndex` answers "earliest start >= t at which a VM of g GPUs (or a
gang of N of them) fits for d seconds on one of these hosts, and on which
host" without scanning every host. For every host and every g it keeps the
*runs*: maximal intervals during which the host has >= g GPUs free. Runs are
kept in heaps per (g, length class) ordered by (run start, free GPUs at the
start, host name); the length class is log2 of the run length, so a query for
duration d only looks at classes that can hold d, and all runs of a longer
class fit as soon as they start. Entries are invalidated lazily: an entry is
live only while its run is still one of the host's current runs.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence

from .model import Hold, Host

INF = 1 << 62          # "forever" for run ends
NCLS = 26              # length classes: 64 s * 2**k; the last one takes the rest
IDLE_SCAN = 48         # up to this many idle hosts: list them; beyond: walk hosts by name


def length_class(length: int) -> int:
    """Class of a run or duration length: runs of a class above cls(d) all
    hold d; runs of a class below it never do."""
    if length <= 0:
        return 0
    c = (length >> 6).bit_length()
    return c if c < NCLS else NCLS - 1


class StepProfile:
    """Piecewise-constant function of time on [origin, infinity)."""

    __slots__ = ("times", "vals")

    def __init__(self, origin: int, value: int):
        self.times: list[int] = [origin]
        self.vals: list[int] = [value]

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"StepProfile({list(zip(self.times, self.vals))})"

    @property
    def origin(self) -> int:
        return self.times[0]

    def value_at(self, t: int) -> int:
        i = bisect_right(self.times, t) - 1
        return self.vals[i if i > 0 else 0]

    def add(self, start: int, end: int, delta: int) -> None:
        """Add delta on [start, end) (clipped to the origin)."""
        times, vals = self.times, self.vals
        if start < times[0]:
            start = times[0]
        if end <= start or delta == 0:
            return
        i = bisect_right(times, start) - 1
        if times[i] != start:
            i += 1
            times.insert(i, start)
            vals.insert(i, vals[i - 1])
        if end >= INF:
            j = len(times)
        else:
            j = bisect_right(times, end) - 1
            if times[j] != end:
                j += 1
                times.insert(j, end)
                vals.insert(j, vals[j - 1])
        for k in range(i, j):
            vals[k] += delta
        # merge equal neighbours at the two edges
        if j < len(times) and vals[j] == vals[j - 1]:
            del times[j], vals[j]
        if i > 0 and vals[i] == vals[i - 1]:
            del times[i], vals[i]

    def min_on(self, start: int, end: int) -> int:
        """Minimum value over [start, end)."""
        times = self.times
        i = bisect_right(times, start) - 1
        if i < 0:
            i = 0
        j = bisect_right(times, end - 1) if end < INF else len(times)
        if j <= i:
            j = i + 1
        return min(self.vals[i:j])

    def max_on(self, start: int, end: int) -> int:
        times = self.times
        i = bisect_right(times, start) - 1
        if i < 0:
            i = 0
        j = bisect_right(times, end - 1) if end < INF else len(times)
        if j <= i:
            j = i + 1
        return max(self.vals[i:j])

    def earliest_fit(self, t0: int, duration: int, need: int) -> int | None:
        """Earliest t >= t0 with value >= need on all of [t, t+duration)."""
        times, vals = self.times, self.vals
        n = len(times)
        if t0 < times[0]:
            t0 = times[0]
        i = bisect_right(times, t0) - 1
        cand = t0
        while i < n:
            seg_end = times[i + 1] if i + 1 < n else INF
            if vals[i] < need:
                if i + 1 >= n:
                    return None
                cand = seg_end
            elif seg_end - cand >= duration:
                return cand
            i += 1
        return None

    def first_below(self, t0: int, level: int) -> int | None:
        """First time >= t0 at which the value is below level (None: never)."""
        times, vals = self.times, self.vals
        i = bisect_right(times, t0) - 1
        if i < 0:
            i = 0
        for k in range(i, len(times)):
            if vals[k] < level:
                return max(times[k], t0)
        return None

    def next_break(self, t: int) -> int | None:
        """First breakpoint strictly after t."""
        i = bisect_right(self.times, t)
        return self.times[i] if i < len(self.times) else None


class HostState:
    """A host's free-GPU profile and its runs per g."""

    __slots__ = ("name", "gpus", "aggregate", "prof", "runs", "idle_from")

    def __init__(self, host: Host, origin: int):
        self.name = host.name
        self.gpus = host.gpus
        self.aggregate = host.aggregate
        self.prof = StepProfile(origin, host.gpus)
        # runs[g]: set of (start, end, free_at_start) with >= g free throughout
        self.runs: list[set[tuple[int, int, int]]] = [set() for _ in range(host.gpus + 1)]
        self.idle_from = origin    # from here on the host is entirely free

    def compute_idle_from(self) -> int:
        p = self.prof
        return p.times[-1] if p.vals[-1] >= self.gpus else INF

    def compute_runs(self) -> list[list[tuple[int, int, int]]]:
        G = self.gpus
        out: list[list[tuple[int, int, int]]] = [[] for _ in range(G + 1)]
        opened: list[tuple[int, int]] = [(0, 0)] * (G + 1)
        prev = 0
        times, vals = self.prof.times, self.prof.vals
        for k in range(len(times)):
            c = vals[k]
            if c > G:
                c = G
            elif c < 0:
                c = 0
            if c > prev:
                t = times[k]
                for g in range(prev + 1, c + 1):
                    opened[g] = (t, c)
            elif c < prev:
                t = times[k]
                for g in range(c + 1, prev + 1):
                    s, f = opened[g]
                    out[g].append((s, t, f))
            prev = c
        for g in range(1, prev + 1):
            s, f = opened[g]
            out[g].append((s, INF, f))
        return out


class ModelIndex:
    """Enabled hosts of one GPU model, with the run heaps."""

    def __init__(self, gpu_model: str, hosts: Iterable[Host], origin: int):
        self.gpu_model = gpu_model
        self.origin = origin
        self.hosts: dict[str, HostState] = {}
        for h in sorted(hosts, key=lambda h: h.name):
            if h.gpus > 0:
                self.hosts[h.name] = HostState(h, origin)
        self.max_gpus = max((h.gpus for h in self.hosts.values()), default=0)
        # heaps[g][c]: sorted lists of entries (start, free_at_start, host_name, end)
        self.heaps: list[list[list[tuple[int, int, str, int]]]] = [
            [[] for _ in range(NCLS)] for _ in range(self.max_gpus + 1)]
        # free-now histogram for "largest free block now"
        self.now_count = [0] * (self.max_gpus + 1)
        # Runs that never end (tails) and start before t would all be
        # candidates at t; they are split in two: hosts entirely free from
        # `idle_from` <= t (free = all their GPUs) found through idle_sorted /
        # static_order, and "partial tails" (>= g free from s until idle_from,
        # then all free) in ptail[g][c], c = class of idle_from - s.
        self.idle_sorted: list[tuple[int, int, str]] = []
        self.static_order = sorted((h.gpus, h.name) for h in self.hosts.values())
        self.ptail: list[list[list[tuple[int, int, str, int]]]] = [
            [[] for _ in range(NCLS)] for _ in range(self.max_gpus + 1)]
        self._built = False

    # -- building -----------------------------------------------------
    def apply_hold(self, host: str, start: int, end: int, gpus: int) -> None:
        """Subtract a hold before build() (no run bookkeeping)."""
        hs = self.hosts.get(host)
        if hs is not None:
            hs.prof.add(start, end, -gpus)

    def build(self) -> None:
        heaps = self.heaps
        for hs in self.hosts.values():
            runs = hs.compute_runs()
            name = hs.name
            idle = hs.idle_from = hs.compute_idle_from()
            self.idle_sorted.append((idle, hs.gpus, name))
            for g in range(1, hs.gpus + 1):
                rs = runs[g]
                hs.runs[g] = set(rs)
                hg = heaps[g]
                for (s, e, f) in rs:
                    hg[length_class(e - s)].append((s, f, name, e))
                if rs and rs[-1][1] >= INF and rs[-1][0] < idle:
                    s0, _, f0 = rs[-1]
                    self.ptail[g][length_class(idle - s0)].append((s0, f0, name, idle))
            self.now_count[self._clamp(hs.prof.vals[0])] += 1
        for hg in heaps + self.ptail:
            for h in hg:
                h.sort()
        self.idle_sorted.sort()
        self._built = True

    def _clamp(self, v: int) -> int:
        return 0 if v < 0 else (self.max_gpus if v > self.max_gpus else v)

    # -- updates ------------------------------------------------------
    def reserve(self, host: str, start: int, end: int, gpus: int) -> None:
        hs = self.hosts[host]
        before_now = hs.prof.vals[0]
        hs.prof.add(start, end, -gpus)
        after_now = hs.prof.vals[0]
        if before_now != after_now:
            self.now_count[self._clamp(before_now)] -= 1
            self.now_count[self._clamp(after_now)] += 1
        runs = hs.compute_runs()
        name = hs.name
        heaps = self.heaps
        push = insort
        old_all = hs.runs
        old_idle = hs.idle_from
        idle = hs.compute_idle_from()
        if idle != old_idle:
            L = self.idle_sorted
            del L[bisect_left(L, (old_idle, hs.gpus, name))]
            insort(L, (idle, hs.gpus, name))
            hs.idle_from = idle
        for g in range(1, hs.gpus + 1):
            new = runs[g]
            old = old_all[g]
            changed = False
            if new and new[-1][1] >= INF and new[-1][0] < idle and (
                    idle != old_idle or new[-1] not in old):
                s0, _, f0 = new[-1]
                push(self.ptail[g][length_class(idle - s0)], (s0, f0, name, idle))
            for r in new:
                if r not in old:
                    changed = True
                    s, e, f = r
                    push(heaps[g][length_class(e - s)], (s, f, name, e))
            if changed or len(new) != len(old):
                old_all[g] = set(new)

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
        if instances == 1:
            return self._earliest_one(t, duration, gpus)
        return self._earliest_gang(t, duration, gpus, instances)

    def _earliest_one(self, t: int, d: int, g: int) -> tuple[int, tuple[str, ...]] | None:
        """Runs of class c are shorter than 64 * 2**c, so a run starting
        before t can cover [t, t+d) only if it starts after t + d - 64*2**c:
        that bounds the part of each list read for runs already open at t.
        Runs starting at or after t are read in (start, free, name) order and
        the first that holds d is the best of its list."""
        hosts = self.hosts
        best: tuple[int, int, str] | None = None
        lists = self.heaps[g]
        top = NCLS - 1
        for c in range(length_class(d), NCLS):
            L = lists[c]
            if not L:
                continue
            if t > self.origin and c == top:
                best = self._open_tails(t, g, best)
                i = bisect_left(L, (t,))
            elif t > self.origin:
                i = bisect_left(L, (t + d - (64 << c) + 1,))
                # runs open before t: fit at t if they last to t + d
                while i < len(L):
                    s, f, name, e = L[i]
                    if s >= t:
                        break
                    hs = hosts[name]
                    if (s, e, f) not in hs.runs[g]:
                        del L[i]
                        continue
                    i += 1
                    if e - t >= d:
                        key = (t, hs.prof.value_at(t), name)
                        if best is None or key < best:
                            best = key
            else:
                i = 0
            n = len(L)
            while i < n:
                ent = L[i]
                s = ent[0]
                if best is not None:
                    if s > best[0]:
                        break
                    if (s, ent[1], ent[2]) >= best:
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
        if best is None:
            return None
        return best[0], (best[2],)

    def _open_tails(self, t: int, g: int, best):
        """Best (t, free, name) among hosts whose never-ending g-run started
        before t."""
        hosts = self.hosts
        # hosts entirely free at t: free = their size; least (gpus, name)
        idle = self.idle_sorted
        k = bisect_left(idle, (t + 1,))
        cand = None
        if k <= IDLE_SCAN:
            for x in idle[:k]:
                if x[1] >= g and (cand is None or (x[1], x[2]) < cand):
                    cand = (x[1], x[2])
        else:
            order = self.static_order
            for j in range(bisect_left(order, (g,)), len(order)):
                gp, name = order[j]
                if hosts[name].idle_from <= t:
                    cand = (gp, name)
                    break
        if cand is not None:
            key = (t, cand[0], cand[1])
            if best is None or key < best:
                best = key
        # partial tails open at t
        for c, L in enumerate(self.ptail[g]):
            if not L:
                continue
            i = bisect_left(L, (t - (64 << c) + 1,)) if c < NCLS - 1 else 0
            j = bisect_left(L, (t,), i)
            for k in range(j - 1, i - 1, -1):
                s, f, name, idle_from = L[k]
                if idle_from <= t:
                    continue
                if best is not None and best[0] == t and (g, name) >= (best[1], best[2]):
                    continue  # cannot beat best: its free at t is >= g
                hs = hosts[name]
                if hs.idle_from != idle_from or (s, INF, f) not in hs.runs[g]:
                    del L[k]
                    continue
                p = hs.prof
                key = (t, p.vals[bisect_right(p.times, t) - 1], name)
                if best is None or key < best:
                    best = key
        return best

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
            for name in sorted(active):
                hs = hosts[name]
                j = hs.prof.min_on(T, T + d) // g
                if j > 0:
                    total += j
                    cands.append((hs.prof.value_at(T), name, hs.aggregate, j))
                b = hs.prof.next_break(T)
                if b is not None and b < nxt:
                    nxt = b
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


def select_gang_hosts(cands: Sequence[tuple[int, str, str | None, int]], n: int) -> tuple[str, ...]:
    """Choose hosts for n VMs among candidates (free_at_start, name,
    aggregate, how_many_vms_fit), all able to start at the same time.

    Prefer one aggregate that can take the whole gang (the tightest: least
    total free, then name); within the chosen set fill the tightest hosts
    first (least free at the start, then name). The rule is shared with the
    reference planner so both choose the same hosts."""
    by_agg: dict[str, list] = {}
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
    for free, name, _agg, j in pool:
        k = min(j, n - len(out))
        out.extend([name] * k)
        if len(out) >= n:
            break
    return tuple(out)


def can_ever_fit(hosts: Sequence[Host], gpu_model: str, gpus_per_vm: int, instances: int) -> bool:
    """Whether the enabled hosts of gpu_model could ever take this lease
    (each VM's GPUs on one host; all VMs of a gang at once)."""
    if gpus_per_vm <= 0 or instances <= 0:
        return False
    total = 0
    for h in hosts:
        if h.enabled and h.gpu_model == gpu_model and h.gpus >= gpus_per_vm:
            total += h.gpus // gpus_per_vm
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
    for h in hosts:
        if h.enabled and h.gpu_model == gpu_model:
            best = max(best, h.gpus - used.get(h.name, 0))
    return best

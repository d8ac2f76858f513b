"""The compiled scan index (scan_index.c) with ModelIndex's interface.

It answers the planner's capacity questions as the reference does (bench/naive_planner.py:
the earliest start, then the least (free GPUs at the start, host name), or with empty_together
capacity.empty_together_key's; gangs chosen by
select_gang_hosts), by reading the hosts' free-GPU profiles in C, each from a start bound
it keeps per host, GPU count and duration class, and skipping the hosts whose bound lies
past the best start found. On any number of hosts that costs less than the runs and heaps
ModelIndex keeps up to date (docs/performance.md, "Start bounds in the scan index").

The C module is built when the package is installed with a C compiler (setup.py; optional):
without it ``available`` is False and every plan uses ModelIndex, with the same results.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import Host

try:
    from ._scan_index import Scan, Steps as Steps   # Steps: the quota book's (quota_book.py)
    available = True
except ImportError:   # installed without a C compiler: ModelIndex and StepProfile answer alone
    available = False

MOST_GPUS = 1 << 20   # the compiled module's bound on a GPU count (scan_index.c)


class ScanIndex:
    """Enabled hosts of one GPU model, their free GPUs as integer arrays in C."""

    __slots__ = ("gpu_model", "origin", "empty_together", "hosts", "max_gpus", "_names", "_pos", "_aggs", "_scan")

    def __init__(self, gpu_model: str, hosts: Iterable[Host], origin: int,
                 holds: Mapping[str, Iterable[tuple[int, int, int]]] | None = None, empty_together: bool = False):
        """holds: each host's holds as (start, end, -gpus), as ModelIndex takes them;
        empty_together: one VM's host chosen as capacity.empty_together_key says."""
        self.gpu_model = gpu_model
        self.origin = origin
        self.empty_together = empty_together
        # a name given twice is one host, the last given (as ModelIndex keeps its hosts)
        self.hosts: dict[str, Host] = {h.name: h for h in sorted((h for h in hosts if h.gpus > 0),
                                                                 key=lambda h: h.name)}
        ordered = list(self.hosts.values())
        self.max_gpus = max((h.gpus for h in ordered), default=0)
        self._names = [h.name for h in ordered]
        self._pos = {name: i for i, name in enumerate(self._names)}
        # each host's aggregate as its rank among the aggregates' names (-1: none)
        agg_names = sorted({h.aggregate for h in ordered if h.aggregate is not None})
        agg_rank = {a: k for k, a in enumerate(agg_names)}
        self._aggs = [-1 if h.aggregate is None else agg_rank[h.aggregate] for h in ordered]
        spans: Mapping[str, Iterable[tuple[int, int, int]]] = holds if holds is not None else {}
        # each host's profile built in C, as StepProfile.of_spans builds it (a plan builds one per host)
        self._scan = Scan(origin, [(h.gpus, spans.get(h.name, ())) for h in ordered])

    def build(self) -> None:
        """Nothing to build (ModelIndex's step, kept for the same interface)."""

    def reserve(self, host: str, start: int, end: int, gpus: int) -> None:
        self._scan.reserve(self._pos[host], start, end, gpus)

    def earliest(self, t: int, duration: int, gpus: int, instances: int = 1
                 ) -> tuple[int, tuple[str, ...]] | None:
        """Earliest start >= t where `instances` VMs of `gpus` GPUs fit for `duration`,
        and the hosts chosen (one per VM)."""
        if gpus <= 0 or gpus > self.max_gpus:
            return None
        if instances == 1:
            one = self._scan.earliest_one(t, duration, gpus, self.empty_together)
            return None if one is None else (one[0], (self._names[one[1]],))
        gang = self._scan.earliest_gang(t, duration, gpus, instances)
        if gang is None:
            return None
        start, found = gang
        return start, self._gang_hosts(found, instances)

    def _gang_hosts(self, found: list[tuple[int, int, int]], n: int) -> tuple[str, ...]:
        """select_gang_hosts's choice among (free at the start, host, VMs that fit), on host
        positions (name order) and aggregate numbers rather than names: a gang on 2,000 hosts
        has about as many candidates. tests/property/test_scan_index_agrees.py holds them equal."""
        aggs = self._aggs
        pool = found
        if n > 1:
            free_of: dict[int, int] = {}
            vms_of: dict[int, int] = {}
            for free, i, vms in found:
                a = aggs[i]
                if a >= 0:
                    free_of[a] = free_of.get(a, 0) + free
                    vms_of[a] = vms_of.get(a, 0) + vms
            fitting = [(f, a) for a, f in free_of.items() if vms_of[a] >= n]
            if fitting:
                best = min(fitting)[1]   # aggregate numbers are in name order: (free, number) is (free, name)
                pool = [c for c in found if aggs[c[1]] == best]
        names, out, left = self._names, [], n
        for _free, i, vms in sorted(pool):
            k = vms if vms < left else left
            out += [names[i]] * k
            left -= k
            if left <= 0:
                break
        return tuple(out)

    def fits_at(self, t: int, duration: int, gpus: int, instances: int = 1) -> tuple[str, ...] | None:
        r = self.earliest(t, duration, gpus, instances)
        if r is not None and r[0] == t:
            return r[1]
        return None

    def largest_free_now(self) -> int:
        return int(self._scan.largest_free_now())

    def overcommitted(self, host: str) -> bool:
        """Whether the host's holds take more GPUs than it has at some instant."""
        return bool(self._scan.overcommitted(self._pos[host]))

    def profile(self, host: str) -> tuple[list[int], list[int]]:
        """The host's free GPUs as (times, values), as StepProfile holds them."""
        return self._scan.profile(self._pos[host])

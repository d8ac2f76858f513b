"""What a reclaim pass may spend on its trials, and the check that spares most of them.

To choose whom to end early for a waiting lease, the pass (reclaim.early_ends) plans again the
leases ahead of it with some borrowers ended: a trial, as costly as a plan of that part of the
queue. A lease examined may try up to three sets per borrower it could end, and a tenant decides
how many leases it borrows with. So a pass makes at most `ReclaimSettings.max_trials` trial
plans, of a size at most `max_trial_size` in all (the leases each places and the hosts it
indexes), and one lease examined at most
`max_trials_per_lease` of them (TrialBudget): past the lease's share it waits for the next pass
and the pass goes on with the next lease; past the pass's, the leases left wait, as past
`max_examined`.

Most sets tried cannot help at all: the GPUs they give back leave the hosts, even with nothing
else waiting, no room for the lease by the notice's end. The leases ahead only take GPUs, so
where the hosts alone have no room, the trial's plan has none either: such a set is refused
without a plan, and costs no trial (RoomOnHosts).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence

from .model import Hold, Host, LeaseRequest
from .profile import INF, StepProfile


class TrialsSpent(Exception):
    """The pass has made all the trial plans it may."""


class LeaseTrialsSpent(TrialsSpent):
    """The lease examined has made all the trial plans one lease may: it waits for the next pass."""


class TrialBudget:
    """The trial plans a pass may still make, the size left to them (the leases they place and the
    hosts they index), and the trial plans left to the lease examined (start_lease)."""

    def __init__(self, most: int, size: int, per_lease: int):
        self.left, self.size, self.per_lease = most, size, per_lease
        self.lease_left = per_lease
        self.trial_size = 1

    def start_lease(self, trial_size: int) -> None:
        """A lease examined, each of whose trial plans is of `trial_size`."""
        self.lease_left, self.trial_size = self.per_lease, max(trial_size, 1)

    @property
    def for_lease(self) -> int:
        """Trial plans the lease examined may still make (by the size left too: on a big cloud
        that runs out first)."""
        return min(self.left, self.lease_left, self.size // self.trial_size)

    def take(self, size: int) -> None:
        """One trial plan of `size` (the leases it places and the hosts it indexes)."""
        if self.left <= 0 or size > self.size:
            raise TrialsSpent
        if self.lease_left <= 0:
            raise LeaseTrialsSpent
        self.left -= 1
        self.lease_left -= 1
        self.size -= size


class RoomOnHosts:
    """Could the hosts alone (the holds, with some borrowers ended; no lease waiting, no quota)
    start the lease's VMs by a time? Each host's profile of free GPUs is made once, and a set of
    borrowers ended is read on the hosts they hold only. For each host, the most of the lease's
    VMs it could start at one time by then; the lease may fit only where those add up to its VMs
    (a gang's VMs start together, so this may say yes where the planner's search says no, never
    the reverse; for one VM it answers as the planner's index does)."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold], lr: LeaseRequest, allowance: int):
        self.g, self.n = lr.gpus_per_vm, lr.instances
        self.t, self.d = max(now, lr.earliest_start), lr.duration + allowance
        self.model = lr.gpu_model
        # as the plan's index counts them: enabled hosts of its model, holds of GPUs not ended yet
        spans: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for h in holds:
            if h.gpus > 0 and h.end > now and h.gpu_model == lr.gpu_model:
                spans[h.host].append((h.start, h.end, -h.gpus))
        self.free = {h.name: StepProfile.of_spans(now, h.gpus, spans.get(h.name, ()))
                     for h in hosts if h.enabled and h.gpus > 0 and h.gpu_model == lr.gpu_model}
        self.held = {name: self._vms(prof) for name, prof in self.free.items()}
        self.totals: dict[int, int] = {}   # by -> the VMs the hosts could start by then, as held
        self.known: dict[tuple[str, int, tuple[str, ...]], list[tuple[int, int]]] = {}   # a host's, some ended

    def _vms(self, prof: StepProfile) -> list[tuple[int, int]]:
        """The most VMs the host could start at one time by s, where that rises: [(s, VMs)]."""
        out: list[tuple[int, int]] = []
        most = 0
        for s in (self.t, *(x for x in prof.times if x > self.t)):
            k = max(prof.min_on(s, s + self.d), 0) // self.g
            if k > most:
                most = k
                out.append((s, k))
        return out

    @staticmethod
    def _by(vms: list[tuple[int, int]], by: int) -> int:
        i = bisect_right(vms, (by, INF)) - 1
        return vms[i][1] if i >= 0 else 0

    def _total(self, by: int) -> int:
        """The VMs the hosts could start by `by`, as held."""
        total = self.totals.get(by)
        if total is None:
            total = self.totals[by] = sum(self._by(vms, by) for vms in self.held.values())
        return total

    def _vms_with(self, name: str, hs: Sequence[Hold], at: int) -> list[tuple[int, int]]:
        """Host `name`'s _vms with the holds `hs` (on it) ended at `at`."""
        key = (name, at, tuple(sorted(h.lease_id for h in hs)))
        vms = self.known.get(key)
        if vms is None:
            prof = self.free[name]
            back = StepProfile.__new__(StepProfile)
            back.times, back.vals = prof.times[:], prof.vals[:]
            for h in hs:
                if h.gpu_model == self.model:
                    back.add(max(at + h.allowance, h.start), h.end, h.gpus)
            vms = self.known[key] = self._vms(back)
        return vms

    def allows(self, ended: Mapping[str, Sequence[Hold]], at: int, by: int) -> bool:
        """With the holds `ended` (by host) ended at `at` (held until the release after it, as
        reclaim._cut leaves them)?"""
        total = self._total(by)
        for name, hs in ended.items():
            if name in self.free:
                total += self._by(self._vms_with(name, hs, at), by) - self._by(self.held[name], by)
        return total >= self.n

    def allows_each_more(self, victims: Iterable[Sequence[Hold]], at: int, by: int) -> Iterator[bool]:
        """allows() for the first one, two, ... of `victims` (each a lease's holds) ended together,
        in turn: each answer reads again only the hosts of the lease added (one by one, a set of
        thousands of borrowers cost the square of their number)."""
        total = self._total(by)
        ended: dict[str, list[Hold]] = defaultdict(list)
        now_on: dict[str, int] = {}   # a host's VMs by `by` with its holds ended so far
        for hs in victims:
            for name in dict.fromkeys(h.host for h in hs):
                if name not in self.free:
                    continue
                was = now_on.get(name)
                if was is None:
                    was = self._by(self.held[name], by)
                ended[name].extend(h for h in hs if h.host == name)
                now_on[name] = vms = self._by(self._vms_with(name, ended[name], at), by)
                total += vms - was
            yield total >= self.n

"""What a reclaim pass may spend on its trials, and the check that spares most of them.

To choose whom to end early for a waiting lease, the pass (reclaim.early_ends) plans again the
leases ahead of it with some borrowers ended: a trial, as costly as a plan of that part of the
queue. A lease examined may try up to three sets per borrower it could end, and a tenant decides
how many leases it borrows with. So a pass makes at most `ReclaimSettings.max_trials` trial
plans, placing at most `max_trial_leases` leases in all (TrialBudget); past that, the leases
not yet examined wait for the next pass, as past `max_examined`.

Most sets tried cannot help at all: the GPUs they give back leave no host, even with nothing
else waiting, with room for the lease by the notice's end. The leases ahead only take GPUs, so
where the hosts alone have no room, the trial's plan has none either: such a set is refused
without a plan, and costs no trial (RoomOnHosts, per host for a one-VM lease; room_by, the plan's
own index search, for a gang, counted as a trial: it builds an index of the model's hosts).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from .model import Hold, Host, LeaseRequest
from .plan_run import FAST
from .profile import INF, StepProfile


class TrialsSpent(Exception):
    """The pass has made all the trials it may."""


class TrialBudget:
    """The trial plans a pass may still make, and the leases they may still place."""

    def __init__(self, most: int, leases: int):
        self.left, self.leases = most, leases

    def take(self, leases: int) -> None:
        """One trial placing `leases` leases (TrialsSpent: no more)."""
        if self.left <= 0 or leases > self.leases:
            raise TrialsSpent
        self.left -= 1
        self.leases -= leases


def room_by(now: int, hosts: Sequence[Host], holds: Sequence[Hold], lr: LeaseRequest, by: int,
            allowance: int) -> bool:
    """Could the hosts alone (these holds, no lease waiting, no quota) start lr by `by`? The plan's
    own search on the same index: a plan that places lr by then finds room here too."""
    mi = FAST.capacity(now, hosts, holds).get(lr.gpu_model)
    room = mi.earliest(max(now, lr.earliest_start), lr.duration + allowance, lr.gpus_per_vm,
                       lr.instances) if mi is not None else None
    return room is not None and room[0] <= by


class RoomOnHosts:
    """room_by for a one-VM lease, host by host and without an index: each host's profile of
    free GPUs is made once, and a set of borrowers ended is read on the hosts they hold only
    (on the others, when the lease fits by then is known once). The same answer as room_by:
    a one-VM lease fits where one host has its GPUs free for its whole time."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold], lr: LeaseRequest, allowance: int):
        self.now, self.g = now, lr.gpus_per_vm
        self.t, self.d = max(now, lr.earliest_start), lr.duration + allowance
        # as the plan's index counts them: enabled hosts of its model, holds of GPUs not ended yet
        spans: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for h in holds:
            if h.gpus > 0 and h.end > now and h.gpu_model == lr.gpu_model:
                spans[h.host].append((h.start, h.end, -h.gpus))
        self.free = {h.name: StepProfile.of_spans(now, h.gpus, spans.get(h.name, ()))
                     for h in hosts if h.enabled and h.gpus > 0 and h.gpu_model == lr.gpu_model}
        fits = ((self._fits(prof), name) for name, prof in self.free.items())
        self.alone = sorted((INF if s is None else s, name) for s, name in fits)   # each host's first fit, as held
        self.known: dict[tuple[str, int, tuple[str, ...]], int | None] = {}   # a host's first fit, some ended

    def _fits(self, prof: StepProfile) -> int | None:
        return prof.earliest_fit(self.t, self.d, self.g)

    def allows(self, ended: Mapping[str, Sequence[Hold]], at: int, by: int) -> bool:
        """Could it start by `by` with the holds `ended` (by host) ended at `at` (held until the
        release after it, as reclaim._cut leaves them)?"""
        for s, name in self.alone:
            if s > by:
                break
            if name not in ended:
                return True
        for name, hs in ended.items():
            key = (name, at, tuple(sorted(h.lease_id for h in hs)))
            if key not in self.known:
                prof = self.free.get(name)
                if prof is None:
                    self.known[key] = None
                    continue
                back = StepProfile.__new__(StepProfile)
                back.times, back.vals = prof.times[:], prof.vals[:]
                for h in hs:
                    back.add(at + h.allowance, h.end, h.gpus)   # (add() keeps the origin: now)
                self.known[key] = self._fits(back)
            first = self.known[key]
            if first is not None and first <= by:
                return True
        return False

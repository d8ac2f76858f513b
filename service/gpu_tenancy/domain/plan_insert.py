"""Incremental planning: a new lease fitted into the current plan, without planning again
the leases already in it. Pure, deterministic; see docs/design.md, "Incremental create".

The current plan's placements stay where they are; they are reserved, beside the holds,
as the full planner (planner.plan) reserves the leases it has placed, and the new lease
is then placed by the planner's own step (`PlanRun.place`: earliest start within quota and
capacity, borrowing, reasons, reserve), as if it came after every lease of the plan.
Its position and the counts in its reasons are those of its place in the planner's
order among the plan's leases (a bisection of their order keys).

When the new lease is last in its GPU model's planner order, and the plan it is fitted
into is the full plan of the same inputs, this is exactly what plan() would give it
(tests/property/test_plan_insert.py); the plan with it then is still that full plan.
When it is not last, plan() would place it before some leases, on capacity they have
not taken yet, so no later than here; the answer says its ETA is provisional.

With the queued charge (domain/queued_charge.py) the order keys carry each lease's charge as
of the book's making, and a new lease's charge is what its project has committed ahead of it
then; a new lease that goes before some of its own project's waiting leases (a higher
priority) raises their charges, so the plan with it is no longer plan()'s.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .model import Hold, Host, LeaseRequest, Placement, PlannedLease, QuotaLimit, Reason
from .plan_order import FAIR, FairShareScores, LeasesAhead, OrderKey
from .plan_prefix import placement_holds
from .plan_run import FAST, PlanRun
from .plan_settings import PlannerSettings
from .plan_words import plural
from .planner import Trials
from .queued_charge import NewLeaseCharge


@dataclass(frozen=True)
class Planned:
    """A lease of the current plan: what it asked for, and where the plan has it (None: nowhere)."""
    request: LeaseRequest
    placement: Placement | None
    borrowing: bool = False


@dataclass(frozen=True)
class Inserted:
    planned: PlannedLease   # position, placement, reasons: as the answer shows them
    last: bool              # last of its GPU model in the planner's order
    exact: bool             # the plan with it is the full plan of the same inputs (so is its placement)


class PlanBook:
    """The current plan, as capacity and quota left over time and the planner's order of
    its leases, per GPU model; each insert() adds one lease to it.

    `exact`: the plan handed in is what plan() gives for these inputs (the engine's last
    full plan, with only in-order insertions since); it stays exact per GPU model while
    every lease inserted is last in its model's order."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], planned: Sequence[Planned],
                 usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings,
                 exact: Mapping[str, bool] | None = None):
        _refuse_unfittable(settings)
        reserved = [hold for p in planned for hold in _holds(p, settings.release_allowance)]
        run = PlanRun(now, hosts, holds, quotas, usage, settings, FAST, set(), planned=reserved)
        self._setup(run, quotas, [p.request for p in planned], usage, settings, exact, holds)
        self._places.update((p.request.lease_id, p.placement) for p in planned)

    @classmethod
    def of_run(cls, run: PlanRun, quotas: Mapping[tuple[str, str], QuotaLimit], requests: Sequence[LeaseRequest],
               usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings,
               holds: Sequence[Hold]) -> PlanBook:
        """The book of a plan just made, its state taken over as it is (planner.Planning's run once
        every lease is reserved: the capacity and quota the book would rebuild from its placements),
        `requests` its leases still waiting, `holds` the holds of now (the queued charge is read from
        them: a lease the plan started is a hold here, which counts for all its project's leases;
        the replay checks the order of now itself before it takes a fit as exact). The run is the book's from then on. Its fits are placed
        as a rebuilt book's (tests/property/test_lazy_plan_property.py); their reasons may differ
        where the plan was made without them (explain=False leaves the quotas that never bind
        unread) or earlier than the fit ("largest free block now" is the plan's now)."""
        _refuse_unfittable(settings)
        book = cls.__new__(cls)
        book._setup(run, quotas, requests, usage, settings, None, holds)
        return book

    def _setup(self, run: PlanRun, quotas: Mapping[tuple[str, str], QuotaLimit], requests: Sequence[LeaseRequest],
               usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings,
               exact: Mapping[str, bool] | None, holds: Sequence[Hold]) -> None:
        self.quotas, self.settings, self._run = quotas, settings, run
        self._scores = FairShareScores(quotas, usage)
        # the queued charge as of now (nothing read with the rule off)
        self._charge = NewLeaseCharge(requests, holds, run.now, quotas, settings.queued_charge,
                                      settings.queued_charge_spares_gpus)
        self._keys: dict[str, list[OrderKey]] = defaultdict(list)
        # with the queued charge: each lease's key (to move it when a new lease raises its charge),
        # each project's keys per model (its own leases ahead of a lower score, as the reasons
        # count them) and each lease's charge (what the reasons tell: the run reads it)
        self._charged = settings.queued_charge is not None
        self._key_of: dict[str, OrderKey] = {}   # every lease's key (to find it again when it changes)
        # where the book has reserved each lease (a lease whose duration changed: its last place)
        self._places: dict[str, Placement | None] = {}
        self._own_keys: dict[tuple[str, str], list[OrderKey]] = defaultdict(list)
        self._charges: dict[str, float] = {}
        run.charged = self._charges
        for lr in requests:
            key = self._note(lr, self._key(lr))
            self._keys[lr.gpu_model].append(key)
            if self._charged:
                self._own_keys[(lr.gpu_model, lr.project_id)].append(key)
        for keys in (*self._keys.values(), *self._own_keys.values()):
            keys.sort()
        self.exact: dict[str, bool] = defaultdict(lambda: True, exact or {})

    def holds(self, lease_id: str) -> bool:
        """The lease is in this plan."""
        return lease_id in self._key_of

    def __len__(self) -> int:
        return sum(len(keys) for keys in self._keys.values())

    def _key(self, lr: LeaseRequest) -> OrderKey:
        # planner.order_key without a wait bound (Planning.fair's sum: the same float)
        return (-lr.priority, 1, self._scores.of(lr.project_id, lr.gpu_model) + self._charge(lr), lr.created_at,
                lr.arrival, lr.lease_id)

    def _note(self, lr: LeaseRequest, key: OrderKey) -> OrderKey:
        """lr's key kept, and with the queued charge its charge."""
        self._key_of[lr.lease_id] = key
        if self._charged:
            self._charges[lr.lease_id] = self._charge(lr)
        return key

    def _queue(self, lr: LeaseRequest) -> tuple[OrderKey, bool]:
        """lr's order key, and whether adding it to the waiting leases left the others' keys as
        they were. With the queued charge, a lease that goes before its project's own waiting
        leases (a higher priority) raises their charges: their keys move (plan() of them all
        would order them so), and the plan is no longer the full plan."""
        key = self._note(lr, self._key(lr))
        raised = self._charge.add(lr)
        for other in raised:
            keys, own = self._keys[other.gpu_model], self._own_keys[(other.gpu_model, other.project_id)]
            old = self._key_of[other.lease_id]
            del keys[bisect_left(keys, old)]
            del own[bisect_left(own, old)]
            moved = self._note(other, self._key(other))
            insort(keys, moved)
            insort(own, moved)
        return key, not raised

    def _own_ahead(self, lr: LeaseRequest, key: OrderKey) -> int:
        """Its project's leases ahead of it, of its priority, with a lower score (AheadCounter's `own`)."""
        if not self._charged:
            return 0
        own = self._own_keys[(lr.gpu_model, lr.project_id)]
        return bisect_left(own, key[:3]) - bisect_left(own, key[:2])

    def _insort(self, lr: LeaseRequest, key: OrderKey) -> None:
        """lr's key into the order (and its project's)."""
        insort(self._keys[lr.gpu_model], key)
        if self._charged:
            insort(self._own_keys[(lr.gpu_model, lr.project_id)], key)

    def add(self, p: Planned) -> None:
        """A lease another process inserted: reserved where it was placed, and in the order. One
        already here had its duration changed there (engine/plan_change.py): see changed()."""
        lr = p.request
        if lr.lease_id in self._key_of:
            self.changed(p)
            return
        self._reserve(p)
        keys = self._keys[lr.gpu_model]
        key, kept = self._queue(lr)
        self.exact[lr.gpu_model] = self.exact[lr.gpu_model] and kept and (not keys or keys[-1] < key)
        self._insort(lr, key)
        self._places[lr.lease_id] = p.placement

    def _reserve(self, p: Planned) -> None:
        """p's GPUs and its project's quota taken where it is placed."""
        run = self._run
        mi = run.indexes.get(p.request.gpu_model)
        for hold in _holds(p, self.settings.release_allowance):
            if mi is not None and hold.host in mi.hosts:
                mi.reserve(hold.host, hold.start, hold.end, hold.gpus)
        lr = p.request
        if p.placement is not None and not lr.preemptible and (lr.project_id, lr.gpu_model) not in run.unbinding:
            end = p.placement.end + self.settings.release_allowance
            run.book.reserve(lr.project_id, lr.gpu_model, p.placement.start, end, lr.gpus_per_vm * lr.instances)

    def changed(self, p: Planned) -> None:
        """A lease of the plan whose duration changed, at the place `p` has now: reserved there
        unless that lies within its last place here (a shrink where it was), which stays reserved
        either way (freeing is not one of the book's steps). Its order key is the same (a
        duration is not in it); the plan is no longer plan()'s."""
        lr = p.request
        _refuse_charged(self._charged)
        if not _within(p.placement, self._places.get(lr.lease_id)):
            self._reserve(p)
        self._places[lr.lease_id] = p.placement
        self.exact[lr.gpu_model] = False

    def refit(self, now: int, lr: LeaseRequest) -> Inserted:
        """A lease of the plan placed again with its new duration (engine/plan_change.py), as
        insert() places a new one, around every other lease and its own last place, which stays
        reserved: later than a full plan might put it, so its ETA is provisional."""
        _refuse_charged(self._charged)
        keys = self._keys[lr.gpu_model]
        del keys[bisect_left(keys, self._key_of[lr.lease_id])]   # insert() puts it back
        self.exact[lr.gpu_model] = False
        fitted = self.insert(now, lr)
        fitted.planned.reasons[-1] = Reason(
            "provisional", "placed again for its new duration, around the plan as it stood: the next full "
                           "plan, within seconds, may move its start")
        return fitted

    def taken_out(self, gpu_model: str) -> None:
        """A lease of the plan cancelled since (engine/plan_remove.py): the plan without it is no
        longer plan()'s, which may start the leases behind it earlier. Its place, if this book
        holds it, stays reserved: freeing what the index has taken is not one of its steps, and
        kept, it only leaves those GPUs unused here until the book is built again."""
        self.exact[gpu_model] = False

    def trial(self, now: int, lr: LeaseRequest) -> PlannedLease:
        """Where `lr` would be placed after every lease of the plan, nothing reserved for it
        (planner.Trials: what the counter-offers are made of)."""
        self._run.now = self._run.book.now = max(now, self._run.now)
        return Trials(self._run, self.quotas).place(lr)

    def insert(self, now: int, lr: LeaseRequest) -> Inserted:
        """Place `lr` around the plan (the steps of planner.plan's loop, for one lease) and
        reserve it there; `now` may be later than the plan's (never earlier)."""
        run = self._run
        run.now = run.book.now = max(now, run.now)   # nothing starts before it
        m, keys = lr.gpu_model, self._keys[lr.gpu_model]
        key, kept = self._queue(lr)
        i = bisect_left(keys, key)
        higher = bisect_left(keys, (-lr.priority,))
        own_tier = bisect_left(keys, (-lr.priority, 1))
        own_score = bisect_left(keys, (-lr.priority, 1, key[2]))
        own = self._own_ahead(lr, key)
        ahead = LeasesAhead(i + 1, higher, own_tier - higher, own_score - own_tier - own, i - own_score, 0, own)
        q = self.quotas.get((lr.project_id, m))
        pl = PlannedLease(lr.lease_id, ahead.position, None, [])
        run.place(lr, q, ahead, FAIR, pl)   # always explained: the answer shows its reasons
        last = i == len(keys)
        was_exact = self.exact[m]
        self._insort(lr, key)
        self._places[lr.lease_id] = pl.placement
        self.exact[m] = was_exact and last and kept
        if not self.exact[m]:
            pl.reasons.append(provisional(len(keys) - 1 - i, was_exact))
        return Inserted(pl, last, self.exact[m])


def _refuse_unfittable(settings: PlannerSettings) -> None:
    if not settings.fits_one_by_one:
        # a wait bound or age x size moves leases in the order as time passes, and keep_etas
        # guards leases by what a whole plan finds: only plan() knows any of them
        raise ValueError("incremental planning takes no wait bound, age x size or keep_etas")


def _refuse_charged(charged: bool) -> None:
    if charged:
        # the queued charge counts a lease's GPU-hours for its project's leases behind it: a
        # duration changed moves their keys, which only plan() orders again
        raise ValueError("with the queued charge a changed duration is planned by plan()")


def _within(place: Placement | None, last: Placement | None) -> bool:
    """`place` lies inside `last`: the same hosts, for no longer."""
    return (place is not None and last is not None and place.hosts == last.hosts
            and last.start <= place.start and place.end <= last.end)


def provisional(behind: int, was_exact: bool) -> Reason:
    """Why the ETA of a lease fitted in may still move (it moves at the engine's next full plan)."""
    if behind and was_exact:
        return Reason("provisional", f"fitted in after every waiting lease, though it goes before "
                                     f"{plural(behind, 'lease')} of its GPU model: the next full plan, within "
                                     f"seconds, may start it earlier, not later (unless what runs or waits changes)")
    return Reason("provisional", "fitted in around leases that were themselves fitted in out of order: the next "
                                 "full plan, within seconds, may move its start")


def _holds(p: Planned, allowance: int) -> list[Hold]:
    return placement_holds(p.request, p.placement, p.borrowing, allowance)

"""The planner: order waiting leases fairly and place them on exact times.

Pure, deterministic, standard library only. See docs/design.md, "The planner".

This module is the plan loop (plan, Planning, Trials, plan_with_turns) and the
planner's public names. Its parts: plan_settings.py (PlannerSettings), plan_order.py
(the order: order_key, the wait bound, fair-share scores, the leases ahead of each),
plan_run.py (one plan's state and its step per lease, PlanRun.place, with the reasons in
words), quota_book.py (quota left over time), host_profiles.py, plan_words.py (times,
counts and durations in words) and extension.py (extension_conflicts' checks).

Algorithm (conservative backfill): leases are taken in order (priority desc,
then, when a wait bound is set, those past it, in the order they reached it, then
fair share asc, created_at asc, arrival asc, lease_id); each gets the earliest start
>= max(now, earliest_start) at which all its VMs fit for the whole duration on
what the holds and the leases before it left free, and within its project's
quota at every instant of its window; that placement is then reserved. A later
lease can therefore start early only where it delays nobody ahead of it.

The wait bound (off by default) keeps that promise for the leases fair share
would otherwise keep pushing back (the big leases of heavy tenants): once a lease has waited
`wait_bound` seconds, or `wait_bound_gpu_hours` GPU-hours (its GPUs times the
hours it waited, so a big lease reaches it sooner than a small one), it goes
before every lease of its priority that has not, in the order the leases
reached the bound. Leases reaching it later never come ahead of it, so its
planned start can only move earlier from then on.

With `wait_bound_leases` set, only that many leases past the bound go before
fair share at a time, per GPU model (those that reached it first): the rest
keep their fair-share place until their turn, so a flood of a heavy tenant's
small leases past the bound cannot turn the queue into a first-come one.

With `keep_etas`, the ETA a lease was told when first planned (`first_eta`) is a
promise: fair share decides the order until a plan would start a lease told an
ETA later than that ETA (or not at all). That lease is then *guarded*: it goes
before fair share (after higher priorities), among guarded leases by that ETA,
and the plan is made again, a few rounds at most, so that the plan returned
keeps it; it stays guarded until it starts (the caller keeps `Plan.guarded`
and hands it back as `LeaseRequest.guarded`). Later arrivals fit around a
guarded lease (only a lease guarded after it with an earlier ETA can still push
it back, where going first lands that one on its hosts), and leases no promise
is at stake in keep their fair-share order.

With `age_size_gpu_hours` (off by default), the fair-share score in the order is the
project's halved for every that many GPU-hours the lease has waited (domain/age_size.py):
Slurm's age factor, growing faster for bigger leases, so that fair share stops starving them.
With `queued_charge` (off by default), the GPU-hours a project's holds keep from now and its
waiting leases ahead of a lease will use count in the lease's score too (domain/queued_charge.py):
a light tenant's flood cannot all go before a heavy tenant's big lease.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set as AbstractSet
from dataclasses import dataclass, replace
from operator import itemgetter

from . import extension
from .age_size import aged_score
from .capacity import can_ever_fit, can_ever_fit_on, largest_free_block
from .host_profiles import HostProfiles
from .model import Hold, Host, LeaseRequest, Placement, Plan, PlannedLease, QuotaLimit
from .plan_order import (BOUND, FAIR, GUARDED, AheadCounter, FairShareScores, OrderKey, bound_protected,
                         bound_reached_at, guardable, order_key, past_wait_bound, waiting_since)
from .plan_prefix import EarlierPlan, common_prefix
from .plan_run import FAST, Backend, PlanRun
from .plan_settings import (DEFAULT_AGE_SIZE_GPU_HOURS, DEFAULT_EMPTY_TOGETHER, DEFAULT_KEEP_ETAS, DEFAULT_QUEUED_CHARGE,
                            DEFAULT_QUEUED_CHARGE_SPARES_GPUS, DEFAULT_WAIT_BOUND,
                            DEFAULT_WAIT_BOUND_GPU_HOURS, DEFAULT_WAIT_BOUND_LEASES, PlannerSettings)
from .plan_words import duration_text, fmt_time
from .queued_charge import queued_charges

__all__ = [
    "PlannerSettings", "plan", "extension_conflicts", "can_ever_fit", "can_ever_fit_on", "largest_free_block",
    "order_key", "fmt_time", "DEFAULT_WAIT_BOUND", "DEFAULT_WAIT_BOUND_GPU_HOURS", "DEFAULT_WAIT_BOUND_LEASES",
    "past_wait_bound", "bound_reached_at", "bound_protected", "waiting_since", "DEFAULT_KEEP_ETAS",
    "guardable", "GUARD_ROUNDS", "DEFAULT_AGE_SIZE_GPU_HOURS", "DEFAULT_QUEUED_CHARGE",
    "DEFAULT_QUEUED_CHARGE_SPARES_GPUS", "DEFAULT_EMPTY_TOGETHER", "OrderKey", "Trials", "Turn", "plan_with_turns",
    "trials_after", "Planning",
]

GUARD_ROUNDS = 8   # keep_etas: plans made at most, in one plan() call, to keep the ETAs


def plan(now: int, hosts: Sequence[Host], holds: Sequence[Hold],
         quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
         usage: Mapping[tuple[str, str], float] | None = None,
         settings: PlannerSettings = PlannerSettings(), *, explain: bool = True,
         _backend: Backend = FAST) -> Plan:
    """Plan every waiting lease: a placement (start now or later) or reasons.

    In planner order, each lease: the first reason it can never be planned, if any;
    else the earliest start within its nominal quota and the capacity left; else, or
    sooner, a borrowed start on capacity idle now; why it starts no earlier; and that
    placement reserved for the leases after it.

    explain=False leaves out the reasons why a lease starts later than now (the
    placements are the same): for callers that read placements only, such as the replay.

    With settings.keep_etas: the leases guarded (given so, or found by this call) go by the
    ETA they were told, and the plan returned says which they are (Plan.guarded)."""
    if not settings.keep_etas:
        return _plan_run(now, hosts, holds, quotas, waiting, usage, settings, explain, _backend)[0]
    guarded = frozenset(lr.lease_id for lr in waiting if lr.guarded and guardable(lr))
    for _ in range(GUARD_ROUNDS):
        p = _plan_run(now, hosts, holds, quotas, waiting, usage, settings, explain, _backend, guarded=guarded)[0]
        late = _late(waiting, p, guarded)
        # guarded from now on, found in the last round too: the next plan keeps them
        guarded |= late
        if not late:
            break
    p.guarded = guarded
    return p


def _late(waiting: Sequence[LeaseRequest], p: Plan, guarded: AbstractSet[str]) -> frozenset[str]:
    """The leases told an ETA, not guarded, that plan `p` starts later than that ETA or not at all."""
    out = []
    for lr in waiting:
        if lr.first_eta is not None and not lr.preemptible and lr.lease_id not in guarded:
            eta = p.leases[lr.lease_id].eta
            if eta is None or eta > lr.first_eta:
                out.append(lr.lease_id)
    return frozenset(out)


@dataclass(frozen=True)
class Turn:
    """Trials taken in the middle of a plan: `then` is called with the plan's Trials right
    before the first lease whose order key is `key` or later (at the end if none is), so
    that a new lease of that key is tried after exactly the leases the order puts before it."""
    key: OrderKey
    then: Callable[[Trials], None]


def plan_with_turns(now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                    quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
                    usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings,
                    turns: Sequence[Turn]) -> Plan:
    """plan(), taking `turns` on the way: the trials cost a few insertions, not a plan each.
    With keep_etas, the leases a plan guards are found first (a plan without turns)."""
    guarded = frozenset(plan(now, hosts, holds, quotas, waiting, usage, settings, explain=False).guarded
                        if settings.keep_etas else ())
    p = _plan_run(now, hosts, holds, quotas, waiting, usage, settings, True, FAST, turns, guarded)[0]
    p.guarded = guarded
    return p


def _plan_run(now: int, hosts: Sequence[Host], holds: Sequence[Hold],
              quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
              usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings, explain: bool,
              _backend: Backend, turns: Sequence[Turn] = (),
              guarded: frozenset[str] = frozenset(),
              charged: Mapping[str, float] | None = None) -> tuple[Plan, PlanRun]:
    """One plan in the planner's order (the `guarded` leases first, by their first ETA), and
    its state once every lease is reserved (what Trials reads)."""
    planning = Planning(now, hosts, holds, quotas, waiting, usage, settings, explain, _backend, turns, guarded,
                        charged)
    planning.advance()
    return planning.plan, planning.run


class Planning:
    """A plan in the making: the waiting leases in the planner's order, planned one after
    another as far as advance() is asked to go (plan() goes to the end at once; a caller that
    needs only the first leases may stop, and go on later with the same result). `charged`: the
    queued charges when `waiting` is a part of the waiting leases (they depend on the whole set:
    queued_charge); None computes them over `waiting`."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
                 usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings, explain: bool,
                 backend: Backend = FAST, turns: Sequence[Turn] = (), guarded: frozenset[str] = frozenset(),
                 charged: Mapping[str, float] | None = None,
                 earlier: Callable[[], EarlierPlan | None] | None = None):
        """`earlier`: an earlier plan whose head a plan of now places as it did, as its caller vouches
        (domain/plan_prefix.py; asked for only when planned on to the end): those leases are placed
        there, not searched for."""
        protected = bound_protected(waiting, now, settings)
        scores = self.scores = FairShareScores(quotas, usage)
        self.quotas, self.settings, self.explain, self.guarded = quotas, settings, explain, guarded

        age_size = settings.age_size_gpu_hours
        if charged is None:
            charged = queued_charges(waiting, holds, now, quotas, settings.queued_charge,
                                     settings.queued_charge_spares_gpus)

        def fair(lr: LeaseRequest) -> float:
            return aged_score(scores.of(lr.project_id, lr.gpu_model) + charged.get(lr.lease_id, 0.0), lr, now, age_size)

        def key(lr: LeaseRequest) -> OrderKey:
            if settings.bounded:
                return order_key(lr, quotas, usage, now, settings, protected, guarded, charged)
            # order_key without a wait bound, each project's score computed once
            if lr.lease_id in guarded:
                return -lr.priority, GUARDED, lr.first_eta or 0, lr.created_at, lr.arrival, lr.lease_id
            return -lr.priority, FAIR, fair(lr), lr.created_at, lr.arrival, lr.lease_id
        self.key, self.fair = key, fair
        self._inputs = (now, hosts, holds, usage, backend, protected, charged)
        self._state: PlanRun | None = None   # made when first read (a plan planned on at once from an
        # earlier plan's head makes only the state with it)
        keyed = sorted([(key(lr), lr) for lr in waiting], key=itemgetter(0))
        self.ordered = [lr for _, lr in keyed]
        # each lease's fair-share score as its key has it (FAIR tier), read again by the reasons
        self.fair_scores: list[float | None] = [k[2] if k[1] == FAIR else None for k, _ in keyed]
        self.done = 0   # how many of `ordered` are planned
        self.pending = sorted(turns, key=lambda t: t.key)
        self.order = AheadCounter(settings.aged)
        self.plan = Plan(now, {})
        self.earlier = earlier
        self.taken = 0   # leases placed from the earlier plan's head

    @property
    def run(self) -> PlanRun:
        """The plan's state: capacity and quota as reserved so far."""
        if self._state is None:
            self._state = self._run(())
        return self._state

    def _run(self, reserved: Sequence[Hold]) -> PlanRun:
        """A new state: the holds, and `reserved` (placements of the plan, as holds)."""
        now, hosts, holds, usage, backend, protected, charged = self._inputs
        run = PlanRun(now, hosts, holds, self.quotas, usage, self.settings, backend, protected, planned=reserved)
        if not self.explain:
            run.skip_unbinding_quotas(holds, self.quotas)
        run.charged = charged   # what the reasons tell
        return run

    def _take_earlier(self) -> None:
        """Before planning on to the end: the earlier plan's head past the leases planned so far
        (which it places as they were) placed where it had them, in a state built at once with
        them held (as their reservations one by one would leave it)."""
        ask, self.earlier = self.earlier, None
        # (its placements carry no reasons: only a plan that does not explain takes them over)
        earlier = ask() if ask is not None and not self.pending and not self.explain else None
        if earlier is None:
            return
        now, protected = self._inputs[0], self._inputs[5]
        kept = common_prefix(self.ordered, earlier, now)
        if kept <= self.done:
            return
        head, placements, allowance = self.ordered[:kept], earlier.placements, self.settings.release_allowance
        reserved = [h for lr in head for h in earlier.holds(lr, allowance)]
        self._state = self._run(reserved)   # (planned leases, not holds, to a borrower)
        out = self.plan.leases
        for lr in head[self.done:]:
            was = placements[lr.lease_id]
            tier = GUARDED if lr.lease_id in self.guarded else BOUND if lr.lease_id in protected else FAIR
            ahead = self.order.next(lr, tier, self.fair(lr) if tier == FAIR else None)
            out[lr.lease_id] = PlannedLease(lr.lease_id, ahead.position, was.placement, [], was.borrowing)
        self.taken, self.done = kept - self.done, kept

    def advance(self, stop: Callable[[int], bool] | None = None) -> None:
        """Plan the leases in order until stop(i) says so before the i-th (0-based), or to the end."""
        if stop is None:
            self._take_earlier()
        run, quotas, explain, guarded, pending, order, fair, scores = (
            self.run, self.quotas, self.explain, self.guarded, self.pending, self.order, self.fair, self.fair_scores)
        out, ordered = self.plan.leases, self.ordered
        i = self.done
        n = len(ordered)
        while i < n:
            if stop is not None and stop(i):
                break
            lr, score = ordered[i], scores[i]
            i += 1
            if pending:
                k = self.key(lr)
                while pending and pending[0].key <= k:
                    pending.pop(0).then(Trials(run, quotas))
            q = quotas.get((lr.project_id, lr.gpu_model))
            tier = GUARDED if lr.lease_id in guarded else BOUND if lr.lease_id in run.protected else FAIR
            if tier == FAIR and score is None:
                score = fair(lr)
            ahead = order.next(lr, tier, score if tier == FAIR else None)
            pl = out[lr.lease_id] = PlannedLease(lr.lease_id, ahead.position, None, [])
            run.place(lr, q, ahead, tier, pl, explain)
        self.done = i
        if i == n:
            for turn in pending:
                turn.then(Trials(run, quotas))
            pending.clear()

    @property
    def finished(self) -> bool:
        return self.done == len(self.ordered)


class Trials:
    """Where a new lease would be placed after the leases a plan has reserved, each asked
    alone: the steps of PlanRun.place (never placeable, within quota, borrowed, its latest
    start), with no placement and no reason when it finds no start by its latest start, nothing
    explained or reserved for it, and a preemptible lease not tried. One trial is one insertion
    (a few index queries), not a replan."""

    def __init__(self, run: PlanRun, quotas: Mapping[tuple[str, str], QuotaLimit]):
        self._run, self._quotas = run, quotas

    def place(self, lr: LeaseRequest) -> PlannedLease:
        run, q = self._run, self._quotas.get((lr.project_id, lr.gpu_model))
        pl = PlannedLease(lr.lease_id, 0, None, [])
        never = run.first_unplaceable_reason(lr, q)
        if never is not None or lr.preemptible:   # a preemptible lease is not tried: it takes any idle GPUs
            pl.reasons += [never] if never is not None else []
            return pl
        assert q is not None   # first_unplaceable_reason: a lease within quota has one
        slot = run.earliest_nominal_start(lr, q)
        run.borrow(lr, q, slot, pl)
        if slot.start is None or slot.hosts is None or (lr.latest_start is not None and slot.start > lr.latest_start):
            return pl
        pl.placement, pl.borrowing = Placement(slot.start, slot.start + lr.duration, tuple(slot.hosts)), slot.borrowing
        return pl


def trials_after(now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], ahead: Sequence[LeaseRequest],
                 usage: Mapping[tuple[str, str], float] | None = None,
                 settings: PlannerSettings = PlannerSettings(),
                 charged: Mapping[str, float] | None = None) -> Trials:
    """Trials of new leases placed after `ahead`, the leases the planner order puts before
    them (a new lease's placement depends on those only: the leases after it never move it).
    `charged`: the queued charges made over all the waiting leases (a project's lease that is
    not ahead still counts in the charge of its leases that are), None: made over `ahead`."""
    return Trials(_plan_run(now, hosts, holds, quotas, ahead, usage, settings, False, FAST,
                            charged=charged)[1], quotas)


# --------------------------------------------------------------------------

def extension_conflicts(now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                        quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
                        usage: Mapping[tuple[str, str], float] | None, lease_id: str, new_end: int,
                        settings: PlannerSettings = PlannerSettings()) -> list[str]:
    """Why lease_id's holds cannot be extended to new_end (empty: allowed).

    The extended holds must fit on their hosts beside the other holds, keep
    the project within quota at every instant, respect max_duration, and must
    not make the planned start of any waiting lease later."""
    mine = [h for h in holds if h.lease_id == lease_id]
    if not mine:
        return [f"lease {lease_id} holds no GPUs"]
    # holds last until the GPUs are back: the planned end plus the release allowance
    allowance = max(h.allowance for h in mine)
    old_end, old_held = max(h.end for h in mine) - allowance, max(h.end for h in mine)
    new_held = new_end + allowance
    if new_held <= old_held:
        return []
    p, m = mine[0].project_id, mine[0].gpu_model
    others = [h for h in holds if h.lease_id != lease_id]
    extended = [replace(h, end=new_held) for h in mine]
    out: list[str] = []

    q = quotas.get((p, m))
    if q is None:
        return [f"project {p} has no quota for {m} GPUs"]
    start = min(h.start for h in mine)
    if q.max_duration is not None and new_end - start > q.max_duration:
        out.append(f"the lease would last {duration_text(new_end - start)}; project {p} may hold {m} GPUs "
                   f"for at most {duration_text(q.max_duration)}")

    profiles = HostProfiles(hosts)
    on_host = extension.gpus_by_host(mine)
    out += extension.host_conflicts(now, profiles, others, on_host, old_held, new_end, allowance)
    out += extension.quota_conflict(now, q, p, m, others + extended, old_held, new_held, any(h.borrowing for h in mine))
    if out:
        return out

    # nobody waiting may start later
    settings = replace(settings, release_allowance=allowance)
    before = plan(now, hosts, holds, quotas, waiting, usage, settings)
    after = plan(now, hosts, others + extended, quotas, waiting, usage, settings)
    delayed = [(lid, pb.placement, after.leases[lid].placement) for lid, pb in before.leases.items()
               if pb.placement is not None and extension.starts_later(pb.placement, after.leases[lid].placement)]
    if not delayed:
        return out
    gpv = {lr.lease_id: lr.gpus_per_vm for lr in waiting}
    free_until = extension.free_until(now, profiles, others, on_host, before, gpv, old_held)
    if free_until is not None:
        free_until -= allowance   # the end that leaves the allowance before the next lease
    for lid, was, would_be in delayed:
        would = f"would start at {fmt_time(would_be.start)}" if would_be else "would find no slot"
        msg = (f"extending to {fmt_time(new_end)} would delay lease {lid} "
               f"(planned at {fmt_time(was.start)}, {would})")
        if free_until is not None and free_until > old_end:
            msg += f"; the GPUs are free until {fmt_time(free_until)}"
        elif free_until is not None:
            msg += f"; the GPUs are not free past its end at {fmt_time(old_end)}"
        out.append(msg)
    return out

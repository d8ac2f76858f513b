"""The planner: order waiting leases fairly and place them on exact times.

Pure, deterministic, standard library only. See docs/design.md, "The planner".

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
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence, Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import NamedTuple
from datetime import datetime, timezone

from .age_size import aged_score
from .capacity import ModelIndex, can_ever_fit, largest_free_block
from .fairshare import share_score
from .model import Hold, Host, LeaseRequest, Placement, Plan, PlannedLease, QuotaLimit, Reason
from .profile import INF, StepProfile

__all__ = [
    "PlannerSettings", "plan", "extension_conflicts", "can_ever_fit", "largest_free_block",
    "order_key", "fmt_time", "DEFAULT_WAIT_BOUND", "DEFAULT_WAIT_BOUND_GPU_HOURS", "DEFAULT_WAIT_BOUND_LEASES",
    "past_wait_bound", "bound_reached_at", "bound_protected", "waiting_since", "DEFAULT_KEEP_ETAS",
    "guardable", "GUARD_ROUNDS", "DEFAULT_AGE_SIZE_GPU_HOURS", "OrderKey", "Trials", "Turn", "plan_with_turns",
    "trials_after",
]


# Off by default: on Philly at 80 % and 95 % load a 4 h bound kept the P90 wait of
# the big leases at EASY backfill's but made the P50 and P90 of all leases worse
# than EASY's (docs/performance.md); an operator may trade that way.
DEFAULT_WAIT_BOUND: int | None = None
DEFAULT_WAIT_BOUND_GPU_HOURS: float | None = None
DEFAULT_WAIT_BOUND_LEASES: int | None = None
# Off by default: on the Philly tuning slice it kept 97-100 % of ETAs but took the P50 wait from
# 0.56-0.87x EASY's to 0.77-1.14x (docs/performance.md, "keep_etas")
DEFAULT_KEEP_ETAS = False
# Off by default: see docs/performance.md, "Age x size"
DEFAULT_AGE_SIZE_GPU_HOURS: float | None = None
GUARD_ROUNDS = 8   # keep_etas: plans made at most, in one plan() call, to keep the ETAs


@dataclass(frozen=True)
class PlannerSettings:
    # seconds in which past use counts half as much in fair share (the engine decays usage with it:
    # engine/ledger.py, fairshare.decayed_gpu_hours)
    fairshare_half_life: int = 7 * 24 * 3600
    # a lease that has waited this long (seconds) goes before fair share; None: never
    wait_bound: int | None = DEFAULT_WAIT_BOUND
    # ... or that has waited this many GPU-hours (GPUs x hours waited); None: never
    wait_bound_gpu_hours: float | None = DEFAULT_WAIT_BOUND_GPU_HOURS
    # at most this many leases past the bound go before fair share at a time, per GPU model: those that
    # reached it first (the rest wait in fair-share order until their turn); None: every one
    wait_bound_leases: int | None = DEFAULT_WAIT_BOUND_LEASES
    # seconds from a lease's end until the cloud has released its GPUs (domain/held.py): every
    # lease planned here is held that much longer, so the next lease's ETA includes it
    release_allowance: int = 0
    # the operator's least release allowance: the engine's measured one is never below it (engine/held.py)
    release_floor: int = 0
    # a lease's first ETA is kept against fair share: once a plan would break it, the lease goes by it
    keep_etas: bool = DEFAULT_KEEP_ETAS
    # a waiting lease's fair-share score halves for every this many GPU-hours it has waited
    # (domain/age_size.py); None: fair share alone
    age_size_gpu_hours: float | None = DEFAULT_AGE_SIZE_GPU_HOURS

    @property
    def bounded(self) -> bool:
        return self.wait_bound is not None or self.wait_bound_gpu_hours is not None

    @property
    def aged(self) -> bool:
        """The order moves with time as leases wait (age x size): only a whole plan knows it."""
        return self.age_size_gpu_hours is not None


_DAYS: dict[int, str] = {}   # day number -> "YYYY-MM-DD": a plan formats thousands of times on few days


def fmt_time(t: int) -> str:
    """RFC 3339 UTC, e.g. 2026-12-01T14:20:00Z."""
    day, s = divmod(int(t), 86400)
    date = _DAYS.get(day)
    if date is None:
        if len(_DAYS) > 4096:
            _DAYS.clear()
        date = _DAYS[day] = datetime.fromtimestamp(day * 86400, timezone.utc).strftime("%Y-%m-%d")
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{date}T{h:02d}:{m:02d}:{s:02d}Z"


def _n(k: int, word: str) -> str:
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def _weight(quotas: Mapping[tuple[str, str], QuotaLimit], p: str, m: str) -> float:
    q = quotas.get((p, m))
    return q.weight if q is not None else 1.0


# the tiers of the order within one priority: guarded (keep_etas), past the wait bound, fair share
GUARDED, BOUND, FAIR = -1, 0, 1


def waiting_since(lr: LeaseRequest) -> int:
    """When the lease began to wait: asked for, or its earliest start if later."""
    return max(lr.created_at, lr.earliest_start)


def bound_reached_at(lr: LeaseRequest, settings: PlannerSettings) -> int | None:
    """When the lease reaches the wait bound (the first of its two forms); None: never."""
    since, at = waiting_since(lr), None
    if settings.wait_bound is not None:
        at = since + settings.wait_bound
    if settings.wait_bound_gpu_hours is not None:
        need = max(1, lr.gpus_per_vm * lr.instances)
        t = since + -(-round(settings.wait_bound_gpu_hours * 3600) // need)
        at = t if at is None else min(at, t)
    return at


def past_wait_bound(lr: LeaseRequest, now: int, settings: PlannerSettings) -> bool:
    at = bound_reached_at(lr, settings)
    return at is not None and now >= at


def bound_protected(waiting: Sequence[LeaseRequest], now: int, settings: PlannerSettings) -> set[str]:
    """The leases that go before fair share: past the wait bound, and, when
    wait_bound_leases is set, among the first that many of their GPU model to reach it."""
    if not settings.bounded:
        return set()
    past = [(lr.gpu_model, -lr.priority, at, lr.created_at, lr.arrival, lr.lease_id)
            for lr in waiting if (at := bound_reached_at(lr, settings)) is not None and now >= at]
    if settings.wait_bound_leases is None:
        return {k[-1] for k in past}
    taken: dict[str, int] = defaultdict(int)
    out = set()
    for k in sorted(past):
        if taken[k[0]] < settings.wait_bound_leases:
            taken[k[0]] += 1
            out.add(k[-1])
    return out


def guardable(lr: LeaseRequest) -> bool:
    """A lease whose ETA can be kept: told one, and not preemptible (those are ended anyway)."""
    return lr.first_eta is not None and not lr.preemptible


def order_key(lr: LeaseRequest, quotas: Mapping[tuple[str, str], QuotaLimit],
              usage: Mapping[tuple[str, str], float] | None, now: int = 0,
              settings: PlannerSettings = PlannerSettings(),
              protected: set[str] | None = None,
              guarded: AbstractSet[str] | None = None) -> tuple[int, int, float, int, int, str]:
    """Planner order: priority desc; then, with keep_etas, the guarded leases (those of
    `guarded`, by default those marked so) by the ETA they were told; then leases past the
    wait bound (those of `protected`, by default every one), by when they reached it; then
    the rest by fair share asc, created_at asc; then the order they were asked in (arrival:
    leases asked in the same second), lease_id."""
    if settings.keep_etas and guardable(lr) and (lr.guarded if guarded is None else lr.lease_id in guarded):
        return (-lr.priority, GUARDED, lr.first_eta or 0, lr.created_at, lr.arrival, lr.lease_id)
    at = bound_reached_at(lr, settings)
    if at is not None and now >= at and (protected is None or lr.lease_id in protected):
        return (-lr.priority, BOUND, at, lr.created_at, lr.arrival, lr.lease_id)
    score = aged_score(share_score(usage, lr.project_id, lr.gpu_model, _weight(quotas, lr.project_id, lr.gpu_model)),
                       lr, now, settings.age_size_gpu_hours)
    return (-lr.priority, FAIR, score, lr.created_at, lr.arrival, lr.lease_id)


# --------------------------------------------------------------------------
# backends: the fast index (default) or a brute-force reference (tests/bench)

class QuotaBook:
    """Per (project, model): remaining nominal quota over time."""

    def __init__(self, now: int, quotas: Mapping[tuple[str, str], QuotaLimit], holds: Sequence[Hold]):
        self.now = now
        self.quotas = quotas
        self.profs: dict[tuple[str, str], StepProfile] = {}
        # at most the lowest remaining quota anywhere in the profile: while it covers a
        # lease, the lease fits at once without walking the profile (a reserve lowers it
        # by its GPUs; the true lowest is read again only when it no longer covers one)
        self.floor: dict[tuple[str, str], int] = {}
        # the holds' quota use, made into a profile only for the (project, model) a lease asks about
        self.held: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
        for h in holds:
            if h.end > now and h.gpus > 0 and not h.preemptible:   # preemptible leases use no quota
                self.held[(h.project_id, h.gpu_model)].append((h.start, h.end, -h.gpus))

    def _prof(self, p: str, m: str) -> StepProfile:
        pr = self.profs.get((p, m))
        if pr is None:
            q = self.quotas.get((p, m))
            pr = self.profs[(p, m)] = StepProfile.of_spans(self.now, q.gpus if q else 0,
                                                           self.held.pop((p, m), ()))
            self.floor[(p, m)] = min(pr.vals)
        return pr

    def earliest(self, p: str, m: str, t: int, d: int, need: int) -> int | None:
        prof = self._prof(p, m)
        if self.floor[(p, m)] < need:
            self.floor[(p, m)] = min(prof.vals)
        if self.floor[(p, m)] >= need:
            return t if t > self.now else self.now
        return prof.earliest_fit(t, d, need)

    def min_remaining(self, p: str, m: str, a: int, b: int) -> int:
        return self._prof(p, m).min_on(a, b)

    def reserve(self, p: str, m: str, a: int, b: int, need: int) -> None:
        self._prof(p, m).add(a, b, -need)
        if b > max(a, self.now):
            self.floor[(p, m)] -= need


def _fast_capacity(now: int, hosts: Sequence[Host], holds: Sequence[Hold]) -> dict[str, ModelIndex]:
    by_model: dict[str, list[Host]] = defaultdict(list)
    for h in hosts:
        if h.enabled:
            by_model[h.gpu_model].append(h)
    idx = {m: ModelIndex(m, hs, now) for m, hs in by_model.items()}
    spans: dict[str, dict[str, list[tuple[int, int, int]]]] = {m: defaultdict(list) for m in idx}
    for hd in holds:
        if hd.end > now and hd.gpus > 0:
            on = spans.get(hd.gpu_model)
            if on is not None:
                on[hd.host].append((hd.start, hd.end, -hd.gpus))
    for m, mi in idx.items():
        mi.apply_holds(spans[m])
        mi.build()
    return idx


@dataclass(frozen=True)
class Backend:
    capacity: Callable[[int, Sequence[Host], Sequence[Hold]], dict[str, ModelIndex]] = _fast_capacity
    quota: Callable[[int, Mapping[tuple[str, str], QuotaLimit], Sequence[Hold]], QuotaBook] = QuotaBook


FAST = Backend()


# --------------------------------------------------------------------------

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


OrderKey = tuple[int, int, float, int, int, str]


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
              guarded: frozenset[str] = frozenset()) -> tuple[Plan, _Run]:
    """One plan in the planner's order (the `guarded` leases first, by their first ETA), and
    its state once every lease is reserved (what Trials reads)."""
    planning = Planning(now, hosts, holds, quotas, waiting, usage, settings, explain, _backend, turns, guarded)
    planning.advance()
    return planning.plan, planning.run


class Planning:
    """A plan in the making: the waiting leases in the planner's order, planned one after
    another as far as advance() is asked to go (plan() goes to the end at once; a caller that
    needs only the first leases may stop, and go on later with the same result)."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
                 usage: Mapping[tuple[str, str], float] | None, settings: PlannerSettings, explain: bool,
                 backend: Backend = FAST, turns: Sequence[Turn] = (), guarded: frozenset[str] = frozenset()):
        run = self.run = _Run(now, hosts, holds, quotas, usage, settings, backend,
                              bound_protected(waiting, now, settings))
        if not explain:
            run.skip_unbinding_quotas(holds, quotas)
        scores = self.scores = _Scores(quotas, usage)
        self.quotas, self.settings, self.explain, self.guarded = quotas, settings, explain, guarded

        age_size = settings.age_size_gpu_hours

        def fair(lr: LeaseRequest) -> float:
            return aged_score(scores.of(lr.project_id, lr.gpu_model), lr, now, age_size)

        def key(lr: LeaseRequest) -> OrderKey:
            if settings.bounded:
                return order_key(lr, quotas, usage, now, settings, run.protected, guarded)
            # order_key without a wait bound, each project's score computed once
            if lr.lease_id in guarded:
                return -lr.priority, GUARDED, lr.first_eta or 0, lr.created_at, lr.arrival, lr.lease_id
            return -lr.priority, FAIR, fair(lr), lr.created_at, lr.arrival, lr.lease_id
        self.key, self.fair = key, fair
        self.ordered = sorted(waiting, key=key)
        self.done = 0   # how many of `ordered` are planned
        self.pending = sorted(turns, key=lambda t: t.key)
        self.order = _Order()
        self.plan = Plan(now, {})

    def advance(self, stop: Callable[[int], bool] | None = None) -> None:
        """Plan the leases in order until stop(i) says so before the i-th (0-based), or to the end."""
        run, quotas, explain, guarded, pending, order, fair = (
            self.run, self.quotas, self.explain, self.guarded, self.pending, self.order, self.fair)
        out, ordered = self.plan.leases, self.ordered
        i = self.done
        n = len(ordered)
        while i < n:
            if stop is not None and stop(i):
                break
            lr = ordered[i]
            i += 1
            if pending:
                k = self.key(lr)
                while pending and pending[0].key <= k:
                    pending.pop(0).then(Trials(run, quotas))
            q = quotas.get((lr.project_id, lr.gpu_model))
            tier = GUARDED if lr.lease_id in guarded else BOUND if lr.lease_id in run.protected else FAIR
            ahead = order.next(lr, tier, fair(lr) if tier == FAIR else None)
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
    alone: its steps in plan() (never placeable, within quota, borrowed, its latest start),
    nothing reserved for it. One trial is one insertion (a few index queries), not a replan."""

    def __init__(self, run: _Run, quotas: Mapping[tuple[str, str], QuotaLimit]):
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
                 settings: PlannerSettings = PlannerSettings()) -> Trials:
    """Trials of new leases placed after `ahead`, the leases the planner order puts before
    them (a new lease's placement depends on those only: the leases after it never move it)."""
    return Trials(_plan_run(now, hosts, holds, quotas, ahead, usage, settings, False, FAST)[1], quotas)


class _Scores:
    """Fair-share scores (share_score) per (project, GPU model), each computed once per plan."""

    def __init__(self, quotas: Mapping[tuple[str, str], QuotaLimit], usage: Mapping[tuple[str, str], float] | None):
        self.quotas, self.usage = quotas, usage
        self.known: dict[tuple[str, str], float] = {}

    def of(self, p: str, m: str) -> float:
        s = self.known.get((p, m))
        if s is None:
            s = self.known[(p, m)] = share_score(self.usage, p, m, _weight(self.quotas, p, m))
        return s


@dataclass
class _Block:
    """For one GPU model: the positions where the current runs of the order began,
    of one priority, then of one tier (guarded, past the wait bound, fair share), then
    of one fair-share score, and how many leases of each tier the priority's run has
    had. The leases of each part ahead of a lease are what its reasons count."""
    priority: int
    priority_from: int
    tier: int
    tier_from: int
    score: float | None
    score_from: int
    tiers: dict[int, int] = field(default_factory=lambda: defaultdict(int))


class _Ahead(NamedTuple):
    """How many leases of its GPU model are ahead of a lease, by which part of the order
    (a tuple: one is made per lease per plan)."""
    position: int      # 1-based
    priority: int      # of higher priority
    bound: int         # past the wait bound while it is not
    fairshare: int     # of projects with a lower fair-share score
    order: int         # of its own tier and score, asked earlier (guarded: told an earlier ETA)
    guarded: int = 0   # keeping the ETA they were told while it is not

    @property
    def total(self) -> int:
        return self.position - 1


class _Order:
    """The planner order seen per GPU model, as it goes: each lease's _Ahead."""

    def __init__(self) -> None:
        self.count: dict[str, int] = defaultdict(int)
        self.blocks: dict[str, _Block] = {}

    def next(self, lr: LeaseRequest, tier: int, score: float | None) -> _Ahead:
        m = lr.gpu_model
        i = self.count[m]
        self.count[m] = i + 1
        b = self.blocks.get(m)
        if b is None or b.priority != lr.priority:
            b = self.blocks[m] = _Block(lr.priority, i, tier, i, score, i)
        elif b.tier != tier:
            b.tier, b.tier_from, b.score, b.score_from = tier, i, score, i
        elif b.score != score:
            b.score, b.score_from = score, i
        ahead = _Ahead(i + 1, b.priority_from, b.tiers[BOUND] if tier == FAIR else 0,
                       b.score_from - b.tier_from, i - b.score_from, b.tiers[GUARDED] if tier != GUARDED else 0)
        b.tiers[tier] += 1
        return ahead


@dataclass
class _Slot:
    """Where a lease can start: the start and hosts (None: nowhere yet), when its quota
    first let it in if that was later than asked, whether capacity pushed it later, and
    whether it borrows beyond its nominal quota."""
    start: int | None = None
    hosts: tuple[str, ...] | None = None
    quota_at: int | None = None
    quota_from: int | None = None   # the start the quota refused first: its window is what blocked
    cap_pushed: bool = False
    borrowing: bool = False


class HostProfiles:
    """The hosts as the planner reads them: the enabled hosts of each GPU model (what a
    lease could ever run on) and each host's free GPUs over time beside some holds.
    plan() and extension_conflicts() both read hosts through it."""

    def __init__(self, hosts: Sequence[Host]):
        self.by_name = {h.name: h for h in hosts}
        self.enabled: dict[str, list[Host]] = defaultdict(list)
        for h in hosts:
            if h.enabled:
                self.enabled[h.gpu_model].append(h)
        self._vm_slots: dict[tuple[str, int], int] = {}

    def vm_slots(self, m: str, g: int) -> int:
        """How many VMs of g GPUs the enabled m hosts take at once, when empty."""
        key = (m, g)
        n = self._vm_slots.get(key)
        if n is None:
            n = self._vm_slots[key] = sum(h.gpus // g for h in self.enabled.get(m, ()))
        return n

    def never_fits(self, m: str, g: int, n: int) -> str:
        """Why n VMs of g GPUs never fit on the enabled m hosts, in words."""
        enabled = self.enabled.get(m, ())
        if not enabled:
            return f"there are no enabled {m} hosts"
        biggest = max(h.gpus for h in enabled)
        if g > biggest:
            return f"needs {g} {m} on one host; the largest enabled {m} host has {biggest}"
        return (f"needs {n} VMs of {g} {m} at the same time; all enabled {m} hosts together "
                f"can take at most {self.vm_slots(m, g)} such VMs")

    def free(self, now: int, name: str, holds: Sequence[Hold]) -> StepProfile | None:
        """Host `name`'s free GPUs over time beside `holds`; None: no such host."""
        host = self.by_name.get(name)
        if host is None:
            return None
        prof = StepProfile(now, host.gpus)
        for h in holds:
            if h.host == name and h.end > now:
                prof.add(h.start, h.end, -h.gpus)
        return prof


class _Run:
    """One plan's state (capacity and quota as reserved so far) and its steps per lease."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], usage: Mapping[tuple[str, str], float] | None,
                 settings: PlannerSettings, backend: Backend, protected: set[str]):
        self.now, self.usage, self.settings, self.protected = now, usage, settings, protected
        self.indexes: dict[str, ModelIndex] = backend.capacity(now, hosts, holds)
        self.book: QuotaBook = backend.quota(now, quotas, holds)
        self.hosts = HostProfiles(hosts)
        self.bound_text = _bound_text(settings)   # once: it goes into the reasons of every lease behind the bound
        self.unbinding: set[tuple[str, str]] = set()   # quotas never read (skip_unbinding_quotas)
        self.used_text: dict[tuple[str, str], str] = {}   # explain(): each project's use, in words

    def skip_unbinding_quotas(self, holds: Sequence[Hold], quotas: Mapping[tuple[str, str], QuotaLimit]) -> None:
        """Leave out the quotas that can never bind: where the hosts fit a lease, its project
        is within quota too, so the start and hosts are capacity's alone (only the why-later
        reasons, which tell when the quota would have let it in, read them).

        At an instant where the chosen hosts have `need` free, the project holds at most the
        model's GPUs C less `need`, plus its holds the index cannot count against C: on hosts
        outside it, or on hosts its holds over-commit (nothing is reserved where free is below
        zero). So a quota of C plus those holds, with nothing to borrow, never binds."""
        outside: dict[tuple[str, str], int] = defaultdict(int)
        uncounted: dict[tuple[str, str], bool] = {}   # (model, host): outside the index or over-committed
        for h in holds:
            if h.end > self.now and h.gpus > 0 and not h.preemptible:
                key = (h.gpu_model, h.host)
                out = uncounted.get(key)
                if out is None:
                    mi = self.indexes.get(h.gpu_model)
                    hs = mi.hosts.get(h.host) if mi is not None else None
                    out = uncounted[key] = hs is None or min(hs.prof.vals) < 0
                if out:
                    outside[(h.project_id, h.gpu_model)] += h.gpus
        size = {m: sum(hs.gpus for hs in mi.hosts.values()) for m, mi in self.indexes.items()}
        self.unbinding = {key for key, q in quotas.items()
                          if q.borrow_gpus == 0 and q.gpus >= size.get(key[1], 0) + outside[key]}

    def first_unplaceable_reason(self, lr: LeaseRequest, q: QuotaLimit | None) -> Reason | None:
        """Why the lease can never be planned as asked: no GPUs or time, more than the
        hosts take, or (within quota only) beyond its project's quota; None: it can."""
        m, p, g, n = lr.gpu_model, lr.project_id, lr.gpus_per_vm, lr.instances
        if g <= 0 or n <= 0 or lr.duration <= 0:
            return Reason("unplaceable", "the lease asks for no GPUs or no time")
        if self.hosts.vm_slots(m, g) < n:
            return Reason("unplaceable", self.hosts.never_fits(m, g, n))
        if lr.preemptible:   # outside quota
            return None
        if q is None or q.gpus + q.borrow_gpus <= 0:
            return Reason("quota", f"project {p} has no quota for {m} GPUs")
        if q.max_duration is not None and lr.duration > q.max_duration:
            return Reason("duration", f"asks for {_dur(lr.duration)}; project {p} may hold {m} GPUs for at most "
                                      f"{_dur(q.max_duration)}")
        if g * n > q.gpus + q.borrow_gpus:
            extra = f" (+{q.borrow_gpus} borrowable)" if q.borrow_gpus else ""
            return Reason("quota", f"needs {g * n} {m} GPUs at once; project {p}'s quota is {q.gpus}{extra}")
        return None

    def earliest_nominal_start(self, lr: LeaseRequest, q: QuotaLimit) -> _Slot:
        """The earliest start at or after max(now, its earliest start) at which the project
        is within its nominal quota and the hosts have room, for the whole time it is held."""
        slot = _Slot()
        g, n, need = lr.gpus_per_vm, lr.instances, lr.gpus_per_vm * lr.instances
        if need > q.gpus:
            return slot
        p, m, d = lr.project_id, lr.gpu_model, lr.duration + self.settings.release_allowance
        mi = self.indexes[m]
        t = max(self.now, lr.earliest_start)
        pushed_to = None   # capacity's answer when it pushed t later
        while True:
            tq = t if (p, m) in self.unbinding else self.book.earliest(p, m, t, d, need)
            if tq is None:
                return slot
            if tq > t and slot.quota_at is None:
                slot.quota_at, slot.quota_from = tq, t
            # Capacity said "earliest at r[0], on these hosts"; asked again
            # at exactly r[0] (nothing reserved since) it gives the same.
            r = pushed_to if pushed_to is not None and pushed_to[0] == tq else mi.earliest(tq, d, g, n)
            if r is None:
                return slot
            if r[0] > tq:
                slot.cap_pushed = True
                t = r[0]
                pushed_to = r
                continue
            slot.start, slot.hosts = r
            return slot

    def borrow(self, lr: LeaseRequest, q: QuotaLimit, slot: _Slot, pl: PlannedLease) -> None:
        """Beyond its nominal quota, up to borrow_gpus, a lease asked for now may start now
        on capacity idle now (never later), when it could not start now within quota."""
        now, p, m = self.now, lr.project_id, lr.gpu_model
        if not (q.borrow_gpus > 0 and max(now, lr.earliest_start) == now
                and (slot.start is None or slot.start > now)):
            return
        need, d = lr.gpus_per_vm * lr.instances, lr.duration + self.settings.release_allowance
        left = self.book.min_remaining(p, m, now, now + d)
        if left + q.borrow_gpus < need:
            return
        r = self.indexes[m].earliest(now, d, lr.gpus_per_vm, lr.instances)
        if r is None or r[0] != now:
            return
        slot.start, slot.hosts = r
        slot.borrowing = True
        pl.reasons.append(Reason("borrowing", f"runs beyond project {p}'s {m} quota on idle capacity: "
                                              f"{q.gpus - left + need} of {q.gpus} GPUs (may borrow {q.borrow_gpus})"))

    def explain(self, lr: LeaseRequest, q: QuotaLimit, slot: _Slot, ahead: _Ahead, tier: int,
                pl: PlannedLease) -> None:
        """Why a lease starts later than now (or than its latest start): the leases ahead,
        by which part of the order, its asked start, its quota, the capacity."""
        now, settings, T = self.now, self.settings, slot.start
        assert T is not None
        if not (T > now or (lr.latest_start is not None and T > lr.latest_start)):
            return
        p, m, need = lr.project_id, lr.gpu_model, lr.gpus_per_vm * lr.instances
        out = pl.reasons
        aged = tier == BOUND
        if ahead.priority:
            out.append(Reason("priority", f"behind {_n(ahead.priority, 'lease')} of higher priority"))
        if tier == GUARDED:
            assert lr.first_eta is not None   # guardable
            behind = f"; behind {_n(ahead.order, 'lease')} told an earlier ETA" if ahead.order else ""
            out.append(Reason("order", f"keeps the ETA it was first told, {fmt_time(lr.first_eta)}, so it goes "
                                       f"before fair share{behind}"))
        elif ahead.guarded:
            out.append(Reason("order", f"{_n(ahead.guarded, 'lease')} keeping the ETA "
                                       f"{'it was' if ahead.guarded == 1 else 'they were'} first told go first"))
        if aged:
            behind = f"; behind {_n(ahead.order, 'lease')} that reached it earlier" if ahead.order else ""
            out.append(Reason("order", f"has waited {self.bound_text}, so it goes before fair share{behind}"))
        elif ahead.bound:
            out.append(Reason("order", f"leases that have waited {self.bound_text} go before fair share; "
                                       f"{ahead.bound} of them {'is' if ahead.bound == 1 else 'are'} ahead"))
        if tier == FAIR and settings.bounded and past_wait_bound(lr, now, settings):
            out.append(Reason("order", f"has waited {self.bound_text}, but only "
                                       f"{_first(settings.wait_bound_leases)} before fair share; "
                                       f"its turn comes as those start"))
        if ahead.fairshare:
            used = self.used_text.get((p, m))
            if used is None:   # once per project: thousands of its leases repeat it
                u = self.usage.get((p, m), 0.0) if self.usage else 0.0
                used = self.used_text[(p, m)] = (f"project {p} has used {_gh(u)} {m} GPU-hours recently "
                                                 f"against weight {q.weight:g}; ")
            waited = " (or that waited more GPU-hours: age x size)" if settings.aged else ""
            out.append(Reason("fairshare", f"{used}{_n(ahead.fairshare, 'lease')} of projects that used "
                                           f"less{waited} go first"))
        if ahead.order and tier == FAIR:
            out.append(Reason("order", f"behind {_n(ahead.order, 'lease')} submitted earlier"))
        t0 = max(now, lr.earliest_start)
        if t0 > now:
            out.append(Reason("order", f"asked to start no earlier than {fmt_time(t0)}"))
        if slot.quota_at is not None and slot.quota_from is not None:
            t1 = slot.quota_from
            held = q.gpus - self.book.min_remaining(p, m, t1, t1 + lr.duration + settings.release_allowance)
            out.append(Reason("quota", f"project {p} holds {held} of {q.gpus} {m} GPUs until "
                                       f"{fmt_time(slot.quota_at)} (this lease needs {need})"))
        if slot.cap_pushed:
            g, n = lr.gpus_per_vm, lr.instances
            what = (f"needs {g} {m} on one host" if n == 1
                    else f"needs {n} VMs of {g} {m} at the same time, each on one host")
            out.append(Reason("capacity", f"{what}; the largest free block now is "
                                          f"{self.indexes[m].largest_free_now()}; earliest at {fmt_time(T)}"))

    def place(self, lr: LeaseRequest, q: QuotaLimit | None, ahead: _Ahead, tier: int, pl: PlannedLease,
              explain: bool = True) -> None:
        """One lease's step in the plan, into `pl`: the first reason it can never be planned, if
        any; else (preemptible) on idle GPUs; else the earliest start within its nominal quota and
        the capacity left, or sooner a borrowed one; why it starts no earlier (with `explain`: the
        `ahead` leases of its order `tier`); and that placement reserved for the leases after it,
        unless it is past the lease's latest start."""
        never = self.first_unplaceable_reason(lr, q)
        if never is not None:
            pl.reasons.append(never)
            return
        if lr.preemptible:
            _place_preemptible(self.now, lr, pl, self.indexes[lr.gpu_model], ahead.total,
                               self.settings.release_allowance)
            return
        assert q is not None   # first_unplaceable_reason: a lease within quota has one
        slot = self.earliest_nominal_start(lr, q)
        self.borrow(lr, q, slot, pl)
        if slot.start is None:
            pl.reasons.append(_no_slot_reason(lr, q))
            return
        if explain:
            self.explain(lr, q, slot, ahead, tier, pl)
        if lr.latest_start is not None and slot.start > lr.latest_start:
            pl.reasons.append(Reason("latest_start", f"the earliest slot is {fmt_time(slot.start)}, after "
                                                     f"its latest start {fmt_time(lr.latest_start)}"))
            return
        self.reserve(lr, slot, pl)

    def reserve(self, lr: LeaseRequest, slot: _Slot, pl: PlannedLease) -> None:
        """The placement, held for the leases after it: its time and the release after it."""
        T, hosts = slot.start, slot.hosts
        assert T is not None and hosts is not None
        end = T + lr.duration + self.settings.release_allowance
        mi = self.indexes[lr.gpu_model]
        for h in hosts:
            mi.reserve(h, T, end, lr.gpus_per_vm)
        if (lr.project_id, lr.gpu_model) not in self.unbinding:
            self.book.reserve(lr.project_id, lr.gpu_model, T, end, lr.gpus_per_vm * lr.instances)
        pl.placement = Placement(T, T + lr.duration, tuple(hosts))
        pl.borrowing = slot.borrowing


def _no_slot_reason(lr: LeaseRequest, q: QuotaLimit) -> Reason:
    p, m, need = lr.project_id, lr.gpu_model, lr.gpus_per_vm * lr.instances
    if need > q.gpus:
        return Reason("quota", f"needs {need} {m} GPUs at once, more than project {p}'s quota of {q.gpus}; "
                               f"it can only borrow capacity idle now, and there is none")
    return Reason("capacity", f"no slot found for {need} {m} GPUs")  # pragma: no cover - capacity tails are free


def _place_preemptible(now: int, lr: LeaseRequest, pl: PlannedLease, mi: ModelIndex, ahead: int,
                       allowance: int = 0) -> None:
    """A preemptible lease takes no quota and any size, wherever GPUs are idle; it
    reserves capacity only (so nothing within quota is planned around it)."""
    g, n, d = lr.gpus_per_vm, lr.instances, lr.duration + allowance
    t0 = max(now, lr.earliest_start)
    r = mi.earliest(t0, d, g, n)
    if r is None:  # pragma: no cover - capacity tails are always free
        pl.reasons.append(Reason("capacity", f"no slot found for {g * n} {lr.gpu_model} GPUs"))
        return
    T, hosts_sel = r
    if lr.latest_start is not None and T > lr.latest_start:
        pl.reasons.append(Reason("latest_start", f"the earliest idle slot is {fmt_time(T)}, after its latest "
                                                 f"start {fmt_time(lr.latest_start)}"))
        return
    if T > now:
        if ahead:
            pl.reasons.append(Reason("order", f"behind {_n(ahead, 'lease')} of its GPU model"))
        pl.reasons.append(Reason(
            "preemptible", f"preemptible: runs only where {g * n} {lr.gpu_model} GPUs are idle; "
                           f"earliest at {fmt_time(T)}"))
    for h in hosts_sel:
        mi.reserve(h, T, T + d, g)
    pl.placement = Placement(T, T + lr.duration, tuple(hosts_sel))


def _gh(u: float) -> str:
    return f"{u:.0f}" if u >= 10 else f"{u:.1f}"


def _first(k: int | None) -> str:
    return "the first lease to reach it goes" if k == 1 else f"the first {k} leases to reach it go"


def _bound_text(settings: PlannerSettings) -> str:
    """The wait bound in words: "4 hours or more", "32 GPU-hours or more", or both."""
    parts = []
    if settings.wait_bound is not None:
        parts.append(f"{_dur(settings.wait_bound)} or more")
    if settings.wait_bound_gpu_hours is not None:
        parts.append(f"{settings.wait_bound_gpu_hours:g} GPU-hours (its GPUs times the hours it waited) or more")
    return ", or ".join(parts)


def _dur(s: int) -> str:
    if s % 86400 == 0:
        return _n(s // 86400, "day")
    if s % 3600 == 0:
        return _n(s // 3600, "hour")
    if s % 60 == 0:
        return _n(s // 60, "minute")
    return _n(s, "second")


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
        out.append(f"the lease would last {_dur(new_end - start)}; project {p} may hold {m} GPUs "
                   f"for at most {_dur(q.max_duration)}")

    profiles = HostProfiles(hosts)
    on_host = _gpus_by_host(mine)
    out += _host_conflicts(now, profiles, others, on_host, old_held, new_end, allowance)
    out += _quota_conflict(now, q, p, m, others + extended, old_held, new_held, any(h.borrowing for h in mine))
    if out:
        return out

    # nobody waiting may start later
    settings = replace(settings, release_allowance=allowance)
    before = plan(now, hosts, holds, quotas, waiting, usage, settings)
    after = plan(now, hosts, others + extended, quotas, waiting, usage, settings)
    delayed = [(lid, pb.placement, after.leases[lid].placement) for lid, pb in before.leases.items()
               if pb.placement is not None and _later(pb.placement, after.leases[lid].placement)]
    if not delayed:
        return out
    gpv = {lr.lease_id: lr.gpus_per_vm for lr in waiting}
    free_until = _free_until(now, profiles, others, on_host, before, gpv, old_held)
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


def _later(before: Placement, after: Placement | None) -> bool:
    return after is None or after.start > before.start


def _host_conflicts(now: int, profiles: HostProfiles, others: Sequence[Hold], on_host: Mapping[str, int],
                    old_held: int, new_end: int, allowance: int) -> list[str]:
    """Its own hosts: the GPUs it holds must stay free beside the other holds until its new end."""
    out = []
    lo, new_held = max(old_held, now), new_end + allowance
    for hname in sorted(on_host):
        prof = profiles.free(now, hname, others)
        if prof is None or prof.min_on(lo, new_held) >= on_host[hname]:
            continue
        t = prof.first_below(lo, on_host[hname])
        assert t is not None   # it is below somewhere on [lo, new_held)
        out.append(f"host {hname} is committed to another lease from {fmt_time(t)}; "
                   f"extending to {fmt_time(new_end)} would over-commit it; the GPUs are free "
                   f"until {fmt_time(t - allowance)}")
    return out


def _quota_conflict(now: int, q: QuotaLimit, p: str, m: str, holds: Sequence[Hold], old_held: int,
                    new_held: int, borrowing: bool) -> list[str]:
    """The project within its quota (and what it borrows, if it does) at every instant."""
    limit = q.gpus + (q.borrow_gpus if borrowing else 0)
    qprof = StepProfile(now, limit)
    for h in holds:
        if h.project_id == p and h.gpu_model == m and h.end > now:
            qprof.add(h.start, h.end, -h.gpus)
    lo = max(old_held, now)
    if qprof.min_on(lo, new_held) >= 0:
        return []
    t = qprof.first_below(lo, 0)
    assert t is not None   # it is below zero somewhere on [lo, new_held)
    return [f"project {p} would hold {limit - qprof.min_on(lo, new_held)} of {q.gpus} {m} GPUs at {fmt_time(t)}"]


def _gpus_by_host(mine: Sequence[Hold]) -> dict[str, int]:
    on_host: dict[str, int] = defaultdict(int)
    for h in mine:
        on_host[h.host] += h.gpus
    return on_host


def _free_until(now: int, profiles: HostProfiles, others: Sequence[Hold], on_host: Mapping[str, int],
                before: Plan, gpv: Mapping[str, int], old_end: int) -> int | None:
    """Latest end the lease could have without touching the planned
    placements (its hosts' GPUs and its project's quota)."""
    planned = [(pl.placement, pl.lease_id) for pl in before.leases.values() if pl.placement]
    best = INF
    for hname, gpus in on_host.items():
        prof = profiles.free(now, hname, others)
        if prof is None:
            continue
        for plc, lid in planned:
            if hname in plc.hosts:
                per_vm = gpv[lid]
                prof.add(plc.start, plc.end, -per_vm * plc.hosts.count(hname))
        t = prof.first_below(max(old_end, now), gpus)
        if t is not None:
            best = min(best, t)
    return None if best >= INF else best

"""Ending leases early so that others get their due: reclaim of borrowed
capacity, and preemption of preemptible leases.

Pure and deterministic, like the planner it builds on. After a plan, each
waiting lease (in planner order) that is within its project's nominal quota
and waits for GPUs is looked at:

- leases of the `preemptible` class that run on its GPU model may be ended for
  it whenever that lets it start sooner;
- borrowing leases of other projects (their project beyond its nominal quota
  at the notice's end, those taken before them aside: reclaimable.py) may
  be ended for it only when it would otherwise wait longer than
  `reclaim_after`, only once they have run `min_runtime`, and never for a
  project that itself yielded GPUs to their project (no reclaim loop).

The victims are the fewest leases that let it start at the notice deadline,
preemptible first, then lowest priority, newest first. Each is told and ends
at `now + notice`. What was decided counts at once for the leases after it.
Each set tried is a plan of the leases ahead of it: a pass makes a bounded
number of them (reclaim_trials.py).

A lease the notes tell will be reclaimed for once it has run its minimum runtime
gets the ETA that reclaim gives it, if that is sooner than the plan's: the reason
and the ETA tell the same story.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .model import Hold, Host, LeaseRequest, Placement, Plan, QuotaLimit, Reason
from .plan_words import duration_text, fmt_time
from .planner import PlannerSettings, plan
from .profile import INF, StepProfile
from .reclaimable import Excess
from .reclaim_trials import LeaseTrialsSpent, RoomOnHosts, TrialBudget, TrialsSpent

__all__ = ["ReclaimSettings", "EarlyEnd", "EarlyEndPlan", "early_ends"]


@dataclass(frozen=True)
class ReclaimSettings:
    reclaim_after: int = 3600     # a lease within quota may wait this long for borrowed GPUs
    notice: int = 900             # warning before a lease is ended early
    min_runtime: int = 3600       # a borrowing lease younger than this is not reclaimed
    max_examined: int = 16        # waiting leases tried per pass: bounds the cost of a replan
    # trials per pass (each a plan of the leases ahead of the one examined, with some borrowers
    # ended), and their size in all (the leases each places and the hosts it indexes): with
    # max_examined, they bound a pass however many leases borrow (a lease examined tries up to
    # three per borrower it could end: _fewest), however long the queue is and however many hosts
    # there are (at 10,000 waiting on 1,000 hosts a plan takes about a second; with no lease ahead a
    # trial on 1,000 hosts still indexes them, about 30 ms: 64 of them were 1.9 s under the lock)
    max_trials: int = 64
    max_trial_size: int = 20_000
    max_trials_per_lease: int = 32   # (so that one lease no set helps leaves the next ones some)


# why a lease examined got no reclaim though borrowers may be ended for it (reclaim_trials.py)
UNSETTLED = ("borrowed GPUs may be reclaimed for it, but whom to end early was not settled in this pass "
             "({} of trial plans ran out); the next pass tries again")


@dataclass(frozen=True)
class EarlyEnd:
    """A running lease to end at `at`, for `for_lease`. `kind` is the state it ends in's
    cause: "reclaimed" (it was borrowing) or "preempted" (it was preemptible)."""
    lease_id: str
    project_id: str
    kind: str
    at: int
    for_lease: str
    for_project: str
    message: str


@dataclass
class EarlyEndPlan:
    ends: list[EarlyEnd] = field(default_factory=list)
    # per waiting lease: what was ended for it, or why borrowed GPUs were not reclaimed for it
    notes: dict[str, list[Reason]] = field(default_factory=dict)
    # per waiting lease: its start once the reclaims its notes announce for later have run
    etas: dict[str, int] = field(default_factory=dict)


def early_ends(now: int, hosts: Sequence[Host], holds: Sequence[Hold],
               quotas: Mapping[tuple[str, str], QuotaLimit], waiting: Sequence[LeaseRequest],
               usage: Mapping[tuple[str, str], float] | None, current: Plan,
               settings: ReclaimSettings = ReclaimSettings(), *, takeable: frozenset[str] | None = None,
               yielded: frozenset[tuple[str, str]] = frozenset(),
               planner_settings: PlannerSettings = PlannerSettings()) -> EarlyEndPlan:
    """Which running leases to end early, and for whom.

    `takeable`: leases that may be ended (running, not already under notice; None: all).
    `yielded`: (project, other) pairs where project's leases were reclaimed for other's:
    project may not reclaim from other in turn."""
    out = EarlyEndPlan()
    deadline = now + settings.notice
    by_lease: dict[str, list[Hold]] = defaultdict(list)
    for h in holds:
        by_lease[h.lease_id].append(h)
    candidates: dict[str, list[str]] = defaultdict(list)   # model -> lease ids
    # (beyond its quota at the deadline, counting the leases running now that run until then:
    # reclaimable.py; less the borrowers taken, as they are taken)
    excess = Excess(holds, quotas, now, deadline)
    for lid, hs in by_lease.items():
        h0 = hs[0]
        borrowing = h0.borrowing and excess.over(h0.project_id, h0.gpu_model)
        if ((borrowing or h0.preemptible) and (takeable is None or lid in takeable)
                and max(h.end for h in hs) > deadline):
            candidates[h0.gpu_model].append(lid)
    if not candidates:
        return out       # the usual case: nothing borrowed or preemptible runs

    requests = {lr.lease_id: lr for lr in waiting}
    hosts_of = {m: [h for h in hosts if h.gpu_model == m] for m in candidates}
    holds = list(holds)
    taken: set[str] = set()
    spare: set[str] = set()   # models where a reclaim of this pass frees more GPUs than its lease needs
    promised: set[str] = set()   # counted on, by an ETA, for a reclaim later
    order_of: dict[str, list[LeaseRequest]] = defaultdict(list)   # model -> waiting in plan order
    examined = 0
    cut_before: dict[tuple[Hold, int], Hold] = {}   # (the trials' holds cut: _cut)
    trials = TrialBudget(settings.max_trials, settings.max_trial_size, settings.max_trials_per_lease)
    for lid, planned in current.leases.items():
        lr = requests.get(lid)
        if lr is None:
            continue
        m, p = lr.gpu_model, lr.project_id
        ahead = list(order_of[m])
        order_of[m].append(lr)
        if m not in candidates or lr.preemptible or planned.borrowing or lr.earliest_start > now:
            continue
        eta = planned.placement.start if planned.placement else INF
        if eta <= deadline:
            continue     # it starts before any notice could run out
        q = quotas.get((p, m))
        need = lr.gpus_per_vm * lr.instances
        if q is None or not _within_nominal(holds, p, m, q, need, deadline, lr.duration):
            continue
        wait = eta - now
        eligible: list[tuple[str, str | None]] = []
        blocked: list[tuple[str, str]] = []
        for vid in candidates[m]:
            h0 = by_lease[vid][0]
            if vid in taken or not (h0.preemptible or excess.over(h0.project_id, m)):
                continue   # (taken, or its project is back within its quota by the deadline: it borrows nothing)
            why_not = None if h0.preemptible else _why_not_reclaim(
                now, h0, p, wait, settings, yielded)
            if why_not:
                blocked.append((vid, why_not))
            else:
                eligible.append((vid, why_not))
        out.notes[lid] = [Reason("borrowing", _borrowing_note(by_lease[vid], why)) for vid, why in blocked]

        room: list[RoomOnHosts] = []   # (made at the first check: most leases examined make none)

        def check() -> RoomOnHosts:
            if not room:
                room.append(RoomOnHosts(now, hosts_of[m], holds, lr, planner_settings.release_allowance))
            return room[0]

        def room_if_ended(victims: list[str], at: int) -> bool:
            """Whether the hosts alone would have room for it by the release after `at`, if
            `victims` end at `at` (no trial: reclaim_trials.py)."""
            ended: dict[str, list[Hold]] = defaultdict(list)
            for vid in victims:
                for h in by_lease[vid]:
                    ended[h.host].append(h)
            return check().allows(ended, at, at + planner_settings.release_allowance)

        def tried(victims: list[str], at: int) -> tuple[Placement, frozenset[str]] | None:
            """Its placement if `victims` end at `at` (and their GPUs are back after the release),
            when it starts by the release after `at`, and the hosts of every lease that starts by
            then in that trial (those the GPUs given back may go to); None: later, or nowhere.
            Planned only where the hosts alone would have room for it by then."""
            if not room_if_ended(victims, at):
                return None
            trials.take(trial_size)
            trial = _cut(holds, set(victims), at, cut_before, m)
            # (its reasons are not read: the placements are the same without them)
            leases = plan(now, hosts_of[m], trial, quotas, [*ahead, lr], usage, planner_settings,
                          explain=False).leases
            by = at + planner_settings.release_allowance
            placed = leases[lid].placement
            if placed is None or placed.start > by:
                return None
            return placed, frozenset(h for pl in leases.values() if pl.placement is not None
                                     and pl.placement.start <= by for h in pl.placement.hosts)

        def start_if_ended(victims: list[str], at: int) -> int | None:
            found = tried(victims, at)
            return found[0].start if found is not None else None

        def fits(victims: list[str]) -> frozenset[str] | None:
            found = tried(victims, deadline)
            return found[1] if found is not None else None

        def could_fit(victims: list[str]) -> bool:
            return room_if_ended(victims, deadline)

        def could_fit_each_more(victims: list[str]) -> Iterator[bool]:
            return check().allows_each_more((by_lease[vid] for vid in victims), deadline,
                                            deadline + planner_settings.release_allowance)

        def on_hosts(victims: list[str], used: frozenset[str]) -> list[str]:
            return [vid for vid in victims if any(h.host in used for h in by_lease[vid])]

        chosen = None
        trial_size = len(ahead) + 1 + len(hosts_of[m])   # (the leases a trial places, the hosts it indexes)
        trials.start_lease(trial_size)
        try:   # (trials spent: this lease, and past the pass's share those after it, wait for the next pass)
            if eligible:
                examined += 1
                if examined > settings.max_examined:
                    break
                if m in spare and fits([]) is not None:
                    continue   # what an earlier reclaim of this pass frees lets it start too: none ended for it
                eligible.sort(key=lambda e: _victim_order(by_lease[e[0]][0]))
                chosen = _fewest([vid for vid, _ in eligible], could_fit, could_fit_each_more, fits, on_hosts,
                                 lambda: trials.for_lease)
            if chosen is None:
                later = [(at, vid) for vid, _ in blocked if vid not in promised
                         and (at := _reclaimable_at(now, by_lease[vid][0], p, eta, settings, yielded)) is not None]
                if later:
                    examined += 1
                    if examined > settings.max_examined:
                        break
                    # (borrowers that may be taken at one instant, in the order that reclaim will take
                    # them: not by lease id, which is random, so that one history tells the same ETAs)
                    later.sort(key=lambda e: (e[0], _victim_order(by_lease[e[1]][0])))
                    _count_on_later_reclaim(out, lid, eta, later, settings, start_if_ended, promised)
                continue
        except LeaseTrialsSpent:
            out.notes[lid] = out.notes[lid] + [Reason("borrowing", UNSETTLED.format("its share"))]
            continue
        except TrialsSpent:
            out.notes[lid] = out.notes[lid] + [Reason("borrowing", UNSETTLED.format("this pass's"))]
            break
        for vid in chosen:
            taken.add(vid)
            excess.take(by_lease[vid])
            out.ends.append(_early_end(by_lease[vid], lr, quotas, now, deadline, settings))
        holds = _cut(holds, set(chosen), deadline, cut_before)
        freed = sum(h.gpus for vid in chosen for h in by_lease[vid])
        if freed > need:
            spare.add(m)
        was = f"until {fmt_time(eta)}" if eta < INF else "with no slot in sight"
        out.notes[lid] = out.notes[lid] + [Reason(
            # (not named: they may be other projects'; each one's early_end.for_lease names this one to operators)
            "reclaim", f"{len(chosen)} lease(s) holding {freed} {m} GPUs "
                       f"end at {fmt_time(deadline)} to make room; it would otherwise have waited {was}")]
    return out


def _within_nominal(holds: Sequence[Hold], p: str, m: str, q: QuotaLimit, need: int, start: int,
                    duration: int) -> bool:
    """Does the project, with this lease, stay within its nominal quota (borrowing aside)?"""
    prof = StepProfile(start, 0)
    for h in holds:
        if h.project_id == p and h.gpu_model == m and not h.preemptible and h.end > start:
            prof.add(max(h.start, start), h.end, h.gpus)
    return prof.max_on(start, start + duration) + need <= q.gpus


def _cut(holds: Sequence[Hold], gone: set[str], at: int, made: dict[tuple[Hold, int], Hold],
         model: str | None = None) -> list[Hold]:
    """The holds (of `model`, or all) with those of the leases in `gone` ended at `at`: held
    until the release after it, as the ledger will then read them. `made`: the holds cut before
    in this pass, each made once (a trial may end thousands of borrowers, and its sets overlap)."""
    out = []
    for h in holds:
        if model is not None and h.gpu_model != model:
            continue
        if h.lease_id in gone:
            cut = made.get((h, at))
            if cut is None:
                cut = made[(h, at)] = replace(h, end=min(h.end, at + h.allowance))
            h = cut
        out.append(h)
    return out


def _why_not_reclaim(now: int, h: Hold, p: str, wait: int, s: ReclaimSettings,
                     yielded: frozenset[tuple[str, str]]) -> str | None:
    if h.project_id == p:
        return "its own project's"
    # never before the minimum runtime's note: that one announces a reclaim
    if (p, h.project_id) in yielded:
        return ("not reclaimed: this project yielded GPUs to that one earlier, "
                "and a reclaim never goes back the other way")
    if wait <= s.reclaim_after:
        return f"reclaim only for a wait over {duration_text(s.reclaim_after)}; this one is {duration_text(wait)}"
    if now - h.start < s.min_runtime:
        return f"reclaim after {fmt_time(h.start + s.min_runtime)} (its minimum runtime of {duration_text(s.min_runtime)})"
    return None


def _reclaimable_at(now: int, h: Hold, p: str, eta: int, s: ReclaimSettings,
                    yielded: frozenset[tuple[str, str]]) -> int | None:
    """When a borrowing lease (not preemptible) held back by its minimum runtime may be
    reclaimed for project p's lease that would otherwise start at `eta`; None: not by a later
    reclaim (its own project's, a reclaim back, past its minimum runtime already, or by then
    the wait left is too short to reclaim for)."""
    at = h.start + s.min_runtime
    if h.preemptible or h.project_id == p or (p, h.project_id) in yielded or at <= now:
        return None
    return at if eta - at > s.reclaim_after else None


def _count_on_later_reclaim(out: EarlyEndPlan, lid: str, eta: int, later: list[tuple[int, str]],
                            s: ReclaimSettings, start_if_ended: Callable[[list[str], int], int | None], promised: set[str]) -> None:
    """The ETA the announced reclaims give: as the engine will decide then, at the moment each
    borrower may be taken, the first of them that (all ending with that notice) let it start
    at the notice's end."""
    victims: list[str] = []
    for at, vid in later:
        victims.append(vid)
        start = start_if_ended(victims, at + s.notice)   # (by the release after that notice's end)
        if start is not None:
            if start < eta:
                out.etas[lid] = start
                promised.update(victims)
            return


def _borrowing_note(hs: list[Hold], why: str) -> str:
    h0 = hs[0]
    gpus = sum(h.gpus for h in hs)
    until = fmt_time(max(h.end - h.allowance for h in hs))   # its own end (held the release longer)
    # the lease's owner reads this: another project is not named (as /v1/share names none)
    if why == "its own project's":
        return f"this project itself is borrowing {gpus} {h0.gpu_model} until {until}"
    return f"another project is borrowing {gpus} {h0.gpu_model} until {until}; {why}"


def _victim_order(h: Hold) -> tuple[bool, int, int, int, int, str]:
    """Preemptible first, then lowest priority, newest first: started last, then asked for last
    (a lease id is random: the order would change from one run of the same history to the next)."""
    return (not h.preemptible, h.priority, -h.start, -h.asked[0], -h.asked[1], h.lease_id)


def _fewest(ordered: list[str], could_fit: Callable[[list[str]], bool],
            could_fit_each_more: Callable[[list[str]], Iterator[bool]],
            fits: Callable[[list[str]], frozenset[str] | None],
            on_hosts: Callable[[list[str], frozenset[str]], list[str]], left: Callable[[], int]) -> list[str] | None:
    """The fewest leases, taken in `ordered`'s preference, whose end lets the lease start:
    one lease if one will do; else the first that together will, less any not needed, tried one
    by one. `fits` is a trial (`could_fit`, the check that may refuse a set without one, is
    free; `could_fit_each_more` answers it for the first one, two, ... in turn), and where the
    trials `left` are too few for all of that:
    - once a set the check let through was refused by its trial, the leases alone, and the
      first ones together, are tried only while enough trials are left to find by halving the
      first that together will among the rest (where more ended never leaves less room, the
      same set);
    - before dropping those not needed one by one, all but those on the hosts that the leases
      starting by the deadline in its trial were placed on (`fits` gives them; it, and those
      ahead that the GPUs given back let start too) are dropped, if that still fits (one
      trial): that set stands if the trials run out while dropping the rest (TrialsSpent
      otherwise: the lease waits).
    (Without the halving, a lease whose sets the check cannot refuse, because the room that a
    lease given a reclaim earlier in the pass will take looks free to it, spent its share on
    the leases alone, pass after pass, until that lease started.)"""
    whole = fits(ordered) if ordered else None
    if whole is None:
        return None
    n = len(ordered)
    if n == 1:
        return ordered
    refused = False   # a set the check let through was refused by its trial: the check may be blind
    alone_known = 0   # the first this many are known not to fit alone
    for vid in ordered:
        if could_fit([vid]):
            if refused and left() <= 2 * (_halvings(n) + 1):   # (the search, a narrowing, some to drop)
                break
            if fits([vid]):
                return [vid]
            refused = True
        alone_known += 1
    fit, unfit, used = n, 0, whole   # the first `fit` together fit (on the hosts `used`), the first `unfit` do not
    for k, room in zip(range(1, n), could_fit_each_more(ordered)):
        if room and not (k == 1 and alone_known):   # (the first alone: known already)
            if refused and left() < fit - unfit:   # (one more at a time may not end in the trials left)
                break
            hosts = fits(ordered[:k])
            if hosts is not None:
                fit, used = k, hosts
                break
            refused = True
        unfit = k
    while fit - unfit > 1:
        mid = (fit + unfit) // 2
        hosts = fits(ordered[:mid])
        if hosts is not None:
            fit, used = mid, hosts
        else:
            unfit = mid
    chosen = ordered[:fit]
    drop = chosen[:-1]   # (without the last the set did not fit)
    narrowed = False
    if len(drop) > left():
        mine = on_hosts(chosen, used)
        if len(mine) == len(chosen):
            narrowed = True   # (all on those hosts already: it stands as it is)
        elif mine and fits(mine):
            chosen, drop, narrowed = mine, mine, True
    try:
        for vid in reversed(drop):
            fewer = [c for c in chosen if c != vid]
            if fits(fewer):
                chosen = fewer
    except TrialsSpent:
        if not narrowed:
            raise
    return chosen


def _halvings(n: int) -> int:
    """Trials a halving search among n sets takes at most."""
    return max(n - 1, 0).bit_length()


def _early_end(hs: list[Hold], lr: LeaseRequest, quotas: Mapping[tuple[str, str], QuotaLimit], now: int,
               deadline: int, s: ReclaimSettings) -> EarlyEnd:
    h0 = hs[0]
    gpus, m = sum(h.gpus for h in hs), h0.gpu_model
    end = max(h.end - h.allowance for h in hs)   # its own end (the hold lasts the release longer)
    notice = (f"it ends at {fmt_time(deadline)}, after a notice of {duration_text(s.notice)}, instead of {fmt_time(end)}; "
              "its data volume is kept")
    if h0.preemptible:
        kind = "preempted"
        # the lease's owner reads this: a lease of another project is neither named nor its project
        whose = "another lease of this project" if lr.project_id == h0.project_id else "a lease of another project"
        message = (f"preempted: {whose} needs "
                   f"{lr.gpus_per_vm * lr.instances} {m} GPUs, and this preemptible lease's {gpus} stand in its "
                   f"way; {notice}")
    else:
        kind = "reclaimed"
        q = quotas.get((h0.project_id, m))
        nominal = q.gpus if q else 0
        message = (f"reclaimed: this lease borrows {gpus} {m} GPUs beyond its project's quota of "
                   f"{nominal}, and a lease of another project, within its own quota, would "
                   f"otherwise wait; {notice}")
    return EarlyEnd(h0.lease_id, h0.project_id, kind, deadline, lr.lease_id, lr.project_id, message)

"""gpu-tenancy in the replay: the service's own planner (domain.planner.plan)
decides, with the engine's semantics (ledger.replan + Lifecycle.tick): each
decision plans the waiting leases against the holds of the running ones (a
kept plan reused, or its head taken over, where that is the same plan); a lease
whose planned start has come starts on the hosts the plan chose and holds them
until it ends; the rest stay queued, told the ETA the create's fit tells. Fair
share is the engine's: decayed GPU-hours (half-life 7 days by default) of what
each tenant held, against its quota weight. The engine's reclaim passes are
whatif/reclaim_passes.py.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpu_tenancy.domain.fairshare import share_score
from gpu_tenancy.domain.lazy_plan import LazyPlan
from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, Plan, QuotaLimit
from gpu_tenancy.domain.plan_prefix import EarlierPlan
from gpu_tenancy.domain.planner import PlannerSettings, order_key, plan
from gpu_tenancy.domain.queued_charge import queued_charges
from gpu_tenancy.domain.reclaim import ReclaimSettings
from gpu_tenancy.whatif.decayed_usage import DecayedUsage
from gpu_tenancy.whatif.earlier_plans import EarlierPlans
from gpu_tenancy.whatif.event_loop import Scheduler
from gpu_tenancy.whatif.kept_plans import FittedBook, KeptPlan, order_of
from gpu_tenancy.whatif.promise import breaches, promised_ids, shape_order, with_promises
from gpu_tenancy.whatif import arrival_fits, reclaim_passes
from gpu_tenancy.whatif.reclaims import Reclaims

MODEL = "GPU"
BREACH_ROUNDS = 8   # promise='breach': plans made again at most this often in one decision
INSERT_MIN_WAITING = 100   # the service's plan_insert_min_waiting (config.py)


def _late_in(p, lr: LeaseRequest) -> bool:
    """Plan `p` starts the lease later than the ETA it was first told, or not at all."""
    eta = p.leases[lr.lease_id].eta
    return eta is None or lr.first_eta is None or eta > lr.first_eta


def quota_limits(shares: dict[str, float], capacity: int, mode: str) -> dict[tuple[str, str], QuotaLimit]:
    """mode 'quota': nominal = share x cluster, the rest borrowable when idle;
    mode 'open': every tenant may hold the whole cluster. Weight = share in both."""
    out = {}
    for t, s in shares.items():
        if mode == "quota":
            nominal = max(1, math.floor(s * capacity))
            out[(t, MODEL)] = QuotaLimit(t, MODEL, nominal, capacity - nominal, None, s)
        else:
            out[(t, MODEL)] = QuotaLimit(t, MODEL, capacity, 0, None, s)
    return out


class GpuTenancy(Scheduler):
    def __init__(self, quotas, half_life: int = 7 * 24 * 3600, name: str = "gpu-tenancy",
                 fairshare: bool = True, aging: int | None = None,
                 settings: PlannerSettings = PlannerSettings(), promise: str | None = None,
                 horizon: int = 0, skip_settled: bool = True,
                 insert_min_waiting: int | None = INSERT_MIN_WAITING, lazy: bool = True,
                 reclaim: ReclaimSettings | None = ReclaimSettings(), reuse: bool = True, prefix: bool = True):
        self.name = name
        # the planner's settings (the wait bound among them); the service's defaults unless given
        self.settings = replace(settings, fairshare_half_life=half_life)
        # aging (an earlier prototype, for comparison only): a lease waiting longer
        # than `aging` seconds is planned at priority 1
        self.aging = aging
        # prototypes (off by default; the rules in promise.py): a lease told an ETA goes before
        # every lease not yet told one, so a later arrival only fits around the promises; the
        # promised leases among themselves by fair share ('fairshare') or by the ETA they were
        # told ('eta'); only those due within `horizon` seconds ('near'); only those fair share
        # would start more than `horizon` seconds late ('breach'); by ETA within a shape ('shape')
        self.promise = promise
        self.horizon = horizon
        self.breached: set[str] = set()
        self.guarded: frozenset[str] = frozenset()   # settings.keep_etas: the last plan's Plan.guarded
        self.replans = 0   # promise='breach': plans made again because one broke a promise
        self.fairshare = fairshare   # False (diagnosis only): no usage, so the order is priority then age
        self.quotas = quotas
        self.decayed = DecayedUsage(half_life)   # what each tenant held, for fair share
        self.waiting: OrderedDict[str, Any] = OrderedDict()
        self.requests: dict[str, LeaseRequest] = {}
        self.plans = 0
        self.plan_seconds = 0.0
        self.skipped = 0
        self.eta_only = 0   # plans run on a full cluster only to give new leases their ETA
        self.hosts: list[Host] | None = None
        self.starts_at: dict[str, int] = {}
        self.borrowing: set[str] = set()
        # the ETA of each lease's first plan (the API's answer). Measuring it costs a plan for
        # every lease that arrives while the cluster is full (otherwise skipped: nothing can
        # start); first_eta = None (replay.py --no-etas) skips them, the outcome the same
        self.first_eta: dict[str, int] | None = {}
        self.unplanned: set[str] = set()      # submitted, not planned yet
        # the waiting leases' shapes (GPUs per VM, VMs): how many of each
        self.shapes: dict[tuple[int, int], int] = {}
        self.holds: dict[str, list[Hold]] = {}   # a running job's holds, made once
        # keep_etas: skip a plan that would be the last one again (_settled); False plans at every event
        self.skip_settled = skip_settled
        self.settled = False   # the last plan kept every ETA it could, and nothing but time has changed since
        self.settled_scores: dict[str, float] = {}   # the tenants' fair-share scores at the last plan
        self.tenants: dict[str, int] = {}   # tenant -> its waiting leases (_same_order reads them)
        self.skipped_settled = 0
        # The service's create fits a new lease into the current plan (domain/plan_insert.py) once
        # that many are planned, and tells it that fit's ETA; so does the replay (default planner
        # only: the PlanBook takes neither a wait bound nor keep_etas). None: the ETA of a full plan.
        self.insert_min_waiting = insert_min_waiting
        self.last_plan: KeptPlan | None = None   # the last full plan, while no job ended since
        self.book: FittedBook | None = None      # the plan as fitted into since (no job ended since)
        self.inserted = 0     # ETAs told by fitting into the plan
        self.eta_plans = 0    # full plans made (on a full cluster) only to fit arrivals into
        self.fit_only = 0     # decisions the fit answered alone (it was the full plan, and started nothing)
        self.next_start: int | None = None   # the earliest planned start after the last decision
        # plan each decision only as far as its starts, its arrivals' ETAs and its wake-up need
        # (domain/lazy_plan.py; the rest when a fit reads the plan), and fit arrivals into that
        # plan's own state rather than a rebuilt one: the same decisions, less CPU
        self.lazy = lazy
        # the engine's reclaim of borrowed GPUs (its defaults unless given; None: never): only quotas
        # with borrowing let a job borrow, so with the trace replay's open quotas it never acts
        self.reclaims = Reclaims(reclaim) if reclaim is not None else None
        self.announced: dict[str, int] = {}   # a decision's reclaims' announced starts, by lease
        self.awaiting_reclaim: frozenset[str] = frozenset()
        # (the instant, the leases awaiting an announced reclaim) of the decision at an instant's ends that
        # arrivals follow: the engine's pass before their creates (its plan is kept for them: KeptPlan.stale)
        self.rows_before_arrivals: tuple[int, frozenset[str]] | None = None
        self.fit_refused = False   # this decision's fit would have started its lease now, or found no room
        # the instant whose arrivals were fitted with more to come: the service's creates fit them one
        # after another with no pass between (engine/plan_insert.py), the engine's pass comes after the last
        self.fitting_at: int | None = None
        # The engine's passes at one instant: its tick, then the creates of the arrivals, then a tick.
        # What a create starts is scheduled, not running, until the tick after its plan: not taken
        # by that tick's reclaim (early_ends.replan_locked takes active leases only)
        self.instant: int | None = None   # the instant of the last decision
        self.ticked = False               # the engine's pass before the arrivals is made at it
        self.scheduled: set[str] = set()  # started at it by the creates of its arrivals
        self.tick_started: set[str] = set()   # started in this decision by that pass
        # with reclaims: the wake-up the last decision asked for, when it was, and whether a job
        # arrived or ended since (a wake-up asked for earlier and not since is no pass: see schedule)
        self.asked_wake: int | None = None
        self.decided_at: int | None = None
        self.events_since = False
        self.submitted = 0
        # A decision at jobs' ends reuses the last plan instead of planning again (the same plan: see
        # _reusable) while nothing but time and ends on time changed since; off: plans at every one
        self.lends = any(q.borrow_gpus for q in quotas.values())   # a lease may borrow (on capacity idle now)
        self.reuse = reuse and not self.lends
        self.reusable: KeptPlan | FittedBook | None = None   # the last plan, while it stands for a plan of now
        self.last_in_order = False   # the last decision's starts came first in its plan's order
        self.reused = 0
        self.asked: dict[str, tuple[int, int]] = {}   # a job's Hold.asked, until it ends
        # A plan read to the end takes over the head of the last plan that a plan of now places as
        # it did (domain/plan_prefix.py; whatif/earlier_plans.py says how far), and searches for the rest
        self.prefix = prefix and lazy
        self.earlier = EarlierPlans() if self.prefix else None

    def submit(self, job, now):
        self.events_since = True
        self.decayed.begin(now)
        self.waiting[job.jid] = job
        if self.first_eta is not None:
            self.unplanned.add(job.jid)
        self.requests[job.jid] = self.request(job)
        # its place in the order of asking, as the engine keeps it (created_at, then the arrival sequence)
        self.submitted += 1
        self.asked[job.jid] = (job.arrival, self.submitted)
        shape = (job.gpus_per_vm, job.vms)
        self.shapes[shape] = self.shapes.get(shape, 0) + 1
        self.tenants[job.tenant] = self.tenants.get(job.tenant, 0) + 1
        self.reusable = None   # a new lease to plan
        self.settled = False   # a new lease: the next plan is not the last one (told an ETA or not)

    def request(self, job) -> LeaseRequest:
        """The lease the planner sees for a job."""
        return LeaseRequest(job.jid, job.tenant, MODEL, job.gpus_per_vm, job.vms, job.duration, job.arrival,
                            None, job.arrival)

    def finished(self, job, now):
        self.events_since = True
        s = self.starts_at.pop(job.jid)
        if now != s + job.duration:   # ended before the end it held: the next plan has more room
            self.settled = False
            self.reusable = None
            if self.earlier is not None:
                self.earlier.moved()
        elif self.last_plan is not None:   # (the first of the jobs ending at this instant)
            self.reusable = self.last_plan if self.last_in_order else None
        elif self.book is not None:   # (the same, when arrivals were fitted into it since)
            self.reusable = self.book if self.book.exact and self.last_in_order else None
        self.holds.pop(job.jid, None)
        self.asked.pop(job.jid, None)
        self.decayed.ended(job.jid, self.usage_key(job), job.gpus, s, now)
        self.borrowing.discard(job.jid)
        if self.reclaims is not None:
            self.reclaims.finished(job.jid)
        self.last_plan = self.book = None   # its holds went: the engine plans again before the next fit

    def usage_key(self, job) -> tuple[str, str]:
        """Whose fair share a job's GPU-hours count in: (project, GPU model)."""
        return job.tenant, MODEL

    def usage(self, now, running) -> dict:
        """The engine's fairshare.decayed_gpu_hours, kept incrementally."""
        return self.decayed.at(now, running, self.usage_key)

    def oldest_waiting(self):
        return next(iter(self.waiting.values()), None)

    def take_cuts(self) -> list[tuple[str, int]]:
        return self.reclaims.take_cuts() if self.reclaims is not None else []

    def take_uncuts(self) -> list[str]:
        return self.reclaims.take_uncuts() if self.reclaims is not None else []

    def _reusable(self, now, running, usage, takeable) -> KeptPlan | FittedBook | None:
        """The last plan, if it is the plan a decision now would make: since it was made nothing
        arrived, every job that ended held its GPUs to its own end (the plan counted them free
        from then on), the jobs started since came first in its order (a lease before a backfilled
        one was placed without it), no planned start has passed unmade, and the tenants' fair-share
        order is its own. Then the holds from now on are its reservations, and a plan of now
        places every lease as it did: where the planner's order or a lease's room moves with the
        time itself (a wait bound, age x size, the queued charge, a borrower that may start only
        now, a reclaim, the prototypes), never."""
        kept, s = self.reusable, self.settings
        if (kept is None or not self.reuse or self.unplanned or takeable or self.aging is not None
                or self.promise is not None or s.bounded or s.aged or s.keep_etas or s.queued_charge is not None
                or s.release_allowance):
            return None
        if self.next_start is not None and now > self.next_start:
            return None
        if any(st + job.duration <= now for job, _hosts, st in running.values()):
            return None   # held one second past its end by a plan of now
        return kept if self._same_order(kept.scores, self._scores(usage)) else None

    def _holds_after(self, running, starts, now: int, cluster) -> list[Hold]:
        """Every hold once `starts` are started now (the running jobs' as kept, cut if under notice)."""
        return [h for job, hosts, st in running.values() for h in self._running_holds(job, hosts, st, now, cluster)
                ] + self._held_from_now(starts, cluster, now)

    def _held_from_now(self, starts, cluster, now: int) -> list[Hold]:
        """The holds of jobs started now (as the next plan of this instant reads them)."""
        return [Hold(job.jid, job.tenant, cluster.names[h], self.usage_key(job)[1], job.gpus_per_vm, now,
                     now + job.duration, job.jid in self.borrowing, asked=self.asked[job.jid])
                for job, hosts in starts for h in hosts]

    def stats(self):
        return {"plans": self.plans, "plan_seconds": self.plan_seconds, "skipped_full": self.skipped,
                "eta_only_plans": self.eta_only, "promise_replans": self.replans,
                "skipped_settled": self.skipped_settled,
                "etas_fitted": self.inserted, "eta_fit_plans": self.eta_plans,
                "decided_by_fit": self.fit_only, "plans_reused": self.reused,
                "placed_from_earlier_plans": self.earlier.taken if self.earlier is not None else 0}

    def _settled(self, now, running, usage) -> bool:
        """keep_etas: a plan now would be the last plan again, so it would start nothing and guard
        nothing (exact, not a guess). No lease arrived since the last plan, and the leases it
        started (starts are made by plans) came first in its order, so every lease left planned
        around them; every job that ended since ended at the end it held, and none still running
        is past it (so the holds from now on are the last plan's); the tenants' fair-share order
        is the last plan's (so the leases' order is too); the last plan guarded no lease it then
        planned late (else a plan with that lease guarded is still to make); and now is before
        its earliest planned start. The same inputs from now on make the same placements: none
        starts now, none is late, none is guarded anew, and its wake-up is already asked for."""
        if not (self.settled and self.skip_settled and self.aging is None and self.promise is None
                and not self.settings.bounded and not self.settings.aged):   # (those orders move with time)
            return False
        if self.next_start is not None and now >= self.next_start:
            return False
        if any(st + job.duration <= now for job, _hosts, st in running.values()):
            return False   # held one second past its end by the next plan's holds
        return self._same_order(self.settled_scores, self._scores(usage))

    def _told(self, etas: dict[str, int | None]) -> None:
        """The arrivals' first ETAs, as the API answered them (None: no slot, no ETA)."""
        for jid, eta in etas.items():
            if eta is not None and self.first_eta is not None:
                self.first_eta[jid] = eta
                self.requests[jid] = replace(self.requests[jid], first_eta=eta)   # as the ledger keeps it
        self.unplanned.clear()

    def _fits(self) -> bool:
        """Arrivals are told the ETA of a fit into the plan, as the service's create does (its
        PlanBook takes no wait bound, age x size or keep_etas; the prototypes plan their own way).
        One GPU model (MODEL, the trace replay's): the kept plan's order is checked per tenant."""
        return (self.insert_min_waiting is not None and self.first_eta is not None and self.promise is None
                and self.aging is None and self.settings.fits_one_by_one)

    def _scores(self, usage) -> dict[str, float]:
        return {t: share_score(usage, t, m, q.weight) for (t, m), q in self.quotas.items()}

    def _charged_order(self, now, holds, scores: dict[str, float]) -> tuple[str, ...] | None:
        """With the queued charge, the waiting leases in the planner's order now (Planning's key,
        the tenants' `scores` given): their charges move with what their projects' holds keep
        from now on, so the tenants' order alone (_same_order) does not tell whether a plan made
        earlier is the plan made now. None with the rule off."""
        s = self.settings
        if s.queued_charge is None:
            return None
        waiting = [self.requests[jid] for jid in self.waiting]
        charged = queued_charges(waiting, holds, now, self.quotas, s.queued_charge, s.queued_charge_spares_gpus)
        return tuple(lr.lease_id for lr in sorted(waiting, key=lambda lr: (
            -lr.priority, scores[lr.project_id] + charged.get(lr.lease_id, 0.0), lr.created_at, lr.arrival,
            lr.lease_id)))

    def _kept_order(self, p: Plan | LazyPlan) -> tuple[str, ...] | None:
        """With the queued charge, the order a kept plan was made in (keeps_order reads it); None off."""
        return order_of(p) if self.settings.queued_charge is not None else None

    def _same_order(self, then: dict[str, float], now: dict[str, float]) -> bool:
        """The tenants with leases waiting are in the same fair-share order (ties alike) under
        both scores: then a plan made earlier is the plan made now (scores decide only the
        order; nothing else moved while no job ended)."""
        tenants = sorted(self.tenants, key=lambda t: (then[t], t))
        return all((then[a] < then[b]) == (now[a] < now[b]) and (then[a] == then[b]) == (now[a] == now[b])
                   for a, b in zip(tenants, tenants[1:]))

    def _running_holds(self, job, hosts, st: int, now: int, cluster) -> list[Hold]:
        """A running job's holds (kept from one decision to the next), cut if it is under notice."""
        mine = self.holds.get(job.jid)
        if mine is None or mine[0].end <= now:   # an end past now: held one second more
            mine = self.holds[job.jid] = [
                Hold(job.jid, job.tenant, cluster.names[h], self.usage_key(job)[1], job.gpus_per_vm, st,
                     max(st + job.duration, now + 1), job.jid in self.borrowing,
                     asked=self.asked[job.jid]) for h in hosts]
            if self.reclaims is not None:
                mine = self.holds[job.jid] = self.reclaims.cut(job.jid, mine)
        return mine

    def schedule(self, now, cluster, running):
        if self.reclaims is not None:
            if reclaim_passes.no_pass(self, now):   # a wake-up the engine no longer asks for
                return [], self.asked_wake
            self.events_since = False
        if self.instant != now:
            self.instant, self.ticked, self.scheduled = now, False, set()
        creates = bool(self.unplanned) and self.arrivals_follow   # (the last create's plan is the tick's)
        self.tick_started = set()
        starts, wake = self._decide(now, cluster, running)
        if creates:
            self.scheduled |= {job.jid for job, _hosts in starts} - self.tick_started
        else:
            self.ticked = True
        if self.reclaims is not None:
            self.asked_wake, self.decided_at = wake, now
        return starts, wake

    def _decide(self, now, cluster, running):
        """One decision: a pass of the engine's (its plan, starts and reclaims), after the creates
        of this instant's arrivals where they come (their ETAs told by a fit into the plan), or
        those creates alone while more arrivals follow. The starts and the wake-up asked for."""
        creates = bool(self.unplanned)   # the decision of the arrivals' creates, then the engine's pass
        if self.reclaims is not None and self.reclaims.noticed_for:
            reclaim_passes.call_off(self, now, running, cluster)
        self.announced = {}   # the starts this decision's reclaims announce (the engine's queue ETAs)
        self.awaiting_reclaim = frozenset()   # leases the pass before the arrivals announced a reclaim for
        rows = self.rows_before_arrivals if self.rows_before_arrivals and self.rows_before_arrivals[0] == now else None
        if not self.waiting:
            return [], None
        takeable = reclaim_passes.may_reclaim(self, now, running)
        # (with keep_etas a plan also guards leases, which the engine keeps: not this skip, _settled's)
        if not self.unplanned and not self.settings.keep_etas and not takeable and not any(cluster.usable_by(g, n)
                                                                           for g, n in self.shapes):
            # Nothing can start now whatever the plan says: no waiting lease fits even in the
            # GPUs free now, and none will until a running job ends, which is an event that
            # asks again (so the wake-up the plan would give changes nothing either). A lease
            # not planned yet is planned all the same, for the ETA it is told on arrival.
            self.skipped += 1
            return [], None
        usage = self.usage(now, running) if self.fairshare else None
        if self.settings.keep_etas and self._settled(now, running, usage):
            self.skipped_settled += 1
            return [], None
        kept_plan = self._reusable(now, running, usage, takeable)
        if kept_plan is not None:
            return self._start_reused(kept_plan, now, cluster)
        self.reusable = None
        if self.hosts is None:
            self.hosts = [Host(n, MODEL, cluster.host_gpus) for n in cluster.names]
            size = cluster.host_gpus * len(cluster.names)
            if any(q.borrow_gpus or q.gpus < size for q in self.quotas.values()):
                self.earlier = None   # a quota may bind: a lease's search then depends on more (earlier_plans.py)
        holds = self._holds_after(running, (), now, cluster)
        full = cluster.free_total == 0
        first: list = []   # started by the engine's pass before the arrivals
        if rows is not None:
            # the engine's pass before this instant's arrivals was this instant's decision at its ends:
            # the creates read the rows it wrote (its reclaims announced for later among them)
            self.awaiting_reclaim = frozenset(j for j in rows[1] if j in self.waiting)
        elif (takeable or self.lends) and self.unplanned and not self.ticked:
            # (what it announces for later does not stand: the replans that ask the arrivals for
            # write every queue ETA again, with only what they announce)
            holds, first = reclaim_passes.before_arrivals(self, now, running, holds, usage, takeable, cluster)
            self.ticked, self.tick_started = True, {job.jid for job, _hosts in first}
            # their rows say so when the arrivals are asked for (a start, no hosts), and no create
            # fits into a plan that has such a lease: it replans in full (engine/plan_insert.py, build)
            self.awaiting_reclaim = frozenset(j for j in self.announced if j in self.waiting)
            self.announced = {}
            takeable = reclaim_passes.may_reclaim(self, now, running, first)
        # (with more arrivals at this instant, the fit is made whatever it costs: it decides whether
        # the engine plans between their creates)
        self.fit_refused = False
        fit = arrival_fits.fit_arrivals(self, now, running, holds, usage, full or self.arrivals_follow)
        fitted = None
        if fit is not None:   # (at least insert_min_waiting planned: the service tells the fit's ETA)
            fitted, exact = fit
            answered = self._answered_by_fit(now, fitted, exact, full, bool(takeable or first))
            if answered is not None:
                starts, wake = answered
                return first + starts, wake
        self.rows_before_arrivals = None   # this plan is a pass of the engine's: its rows are written anew
        p, kept, lazy, next_start = self._plan_now(now, running, holds, usage, takeable)
        self._tell_planned(now, running, holds, usage, p, kept, fitted)
        if cluster.free_total == 0 and not takeable and not first:
            self.eta_only += 1
            self.last_in_order = True   # (nothing starts)
            self.next_start = next_start if lazy else min(
                (pl.placement.start for pl in p.leases.values() if pl.placement is not None), default=None)
            # planned only for the ETAs: as when skipped, nothing starts and no wake-up (nothing may be
            # reclaimed, so nothing is announced for later)
            return [], None
        starts, wake, self.last_in_order = self._start_now(p, now, cluster)
        # (what the pass before the arrivals started, `first`, is in `holds` already: held once)
        if lazy:   # (the leases not planned yet start later than those planned: LazyPlan.decide)
            wake = next_start
        reclaim_wake = None   # when to ask again for what this plan's reclaim announces for later
        held_now = None   # the holds once this pass's starts are held and its reclaims cut
        cuts_before = len(self.reclaims.cuts) if self.reclaims is not None else 0
        if takeable:
            more, wake, reclaim_wake, held_now = reclaim_passes.after_starts(
                self, now, running, cluster, holds, starts, usage, p, takeable, wake)
            starts += more
        # The engine's second tick at an instant of ends or a wake-up, which follows at once when no
        # arrival comes (bench/engine_replay.py asks twice): what this pass changed, it reads.
        tick_again = (not creates and not self.arrival_next and self.reclaims is not None
                      and bool(starts or len(self.reclaims.cuts) > cuts_before))
        # (with more arrivals at this instant, their creates come first, and the pass after the last one)
        if (not self.arrivals_follow and self.lends and self.waiting and self.promise is None
                and not self.settings.keep_etas
                and (not self.last_in_order or tick_again)):
            if held_now is None:
                held_now = holds + self._held_from_now(starts, cluster, now)
            more, wake, reclaim_wake = reclaim_passes.pass_again(
                self, now, running, cluster, held_now, starts, usage, tick_again, reclaim_wake)
            starts += more
        starts = first + starts
        if (self.reclaims is not None and self.reclaims.noticed_for
                and reclaim_passes.call_off(self, now, running, cluster,
                                            self._holds_after(running, starts, now, cluster)) is not None):
            # a notice called off no longer ends anything at its end: the engine is asked again then
            # only for the starts it announces to leases still waiting (their queue ETAs)
            reclaim_wake = reclaim_passes.reclaim_wake(
                self, now, [eta for jid, eta in self.announced.items() if jid in self.waiting])
        if self.arrival_next and not self.unplanned:
            # the rows this pass leaves are what the creates of this instant's arrivals read
            self.rows_before_arrivals = (now, frozenset(j for j in self.announced if j in self.waiting))
        self.next_start = wake
        if reclaim_wake is not None and (wake is None or reclaim_wake < wake):
            wake = reclaim_wake
        return starts, wake

    def _start_reused(self, kept_plan: KeptPlan | FittedBook, now: int, cluster) -> tuple[list, int | None]:
        """A decision answered by the last plan (_reusable): what starts now, and the next start."""
        starts, wake, self.last_in_order = self._start_now(kept_plan.plan, now, cluster)
        self.reused += 1
        if isinstance(kept_plan, FittedBook):
            self.last_plan, self.book = None, kept_plan
        else:
            self.last_plan, self.book = kept_plan, None
        self.next_start = wake
        return starts, wake

    def _answered_by_fit(self, now: int, fitted: dict[str, int | None], exact: bool, full: bool, passed: bool
                         ) -> tuple[list, int | None] | None:
        """The arrivals fitted into the plan (`exact`: the plan with them is the full plan of now):
        the decision, where the fit answers it alone; None: the engine's pass plans. `passed`: a
        borrower may be taken, or the pass before the arrivals started something."""
        self.inserted += len(fitted)
        if self.arrivals_follow:
            # the create fitted it and did no more: the next arrival's is fitted into the same plan,
            # and the engine's pass (plan, starts, reclaims) comes once the last one is asked for
            self._told(fitted)
            self.fitting_at = now
            return [], None
        if passed:
            return None
        # (the earliest planned start, the fits' among them)
        earliest = min((s for s in (self.next_start, *fitted.values()) if s is not None), default=None)
        if full:
            self._told(fitted)
            self.next_start = earliest
            return [], None   # told by the fit alone: nothing can start on a full cluster
        if exact and (self.next_start is None or self.next_start > now):
            # The plan with the fits is the full plan of this decision (each went last in
            # the order), and it starts nothing now: the plan is not made again.
            self._told(fitted)
            self.fit_only += 1
            self.next_start = earliest
            return [], earliest
        return None

    def _plan_now(self, now: int, running, holds: list[Hold], usage, takeable
                  ) -> tuple[Plan, Plan | LazyPlan, bool, int | None]:
        """The engine's plan of every lease waiting now (the prototypes' promises kept their own
        way): the plan, the plan to keep (a LazyPlan reads on when a fit asks), whether it is
        lazy, and then the whole plan's earliest start after now."""
        assert self.hosts is not None   # (set by the decision that plans)
        waiting = [self.requests[jid] for jid in self.waiting]
        if self.aging is not None:
            waiting = [replace(r, priority=1) if now - r.created_at >= self.aging else r for r in waiting]
        promise = self.promise
        told = self.first_eta if promise and self.first_eta is not None else None
        asked = waiting
        lazy = self.lazy and promise is None and not self.settings.keep_etas and not takeable
        next_start: int | None = None   # lazy: the whole plan's earliest start after now
        for _ in range(BREACH_ROUNDS if self.promise == "breach" else 1):
            if told is not None and promise == "shape":
                asked = shape_order(sorted(waiting, key=lambda lr: order_key(lr, self.quotas, usage, now,
                                                                             self.settings)), told)
            elif told is not None and promise is not None:
                promised = promised_ids(promise, told, self.waiting, now, self.horizon, self.breached)
                asked = with_promises(promise, waiting, told, promised)
            t = time.perf_counter()
            if lazy:
                lazy_plan = LazyPlan(now, self.hosts, holds, self.quotas, asked, usage, self.settings,
                                     earlier=self._head(now, running))
                self._made(lazy_plan)
                p, next_start = lazy_plan.decide(self.unplanned)
                kept: Plan | LazyPlan = lazy_plan
            else:
                p = kept = plan(now, self.hosts, holds, self.quotas, asked, usage, self.settings, explain=False)
                self._made(p)
            self.plan_seconds += time.perf_counter() - t
            self.plans += 1
            if told is None or self.promise != "breach":
                break
            late = breaches(p.leases, told, promised, self.horizon)
            if not late:
                break
            self.breached |= late   # promised from now on: its ETA may only move earlier
            self.replans += 1
        return p, kept, lazy, next_start

    def _tell_planned(self, now: int, running, holds: list[Hold], usage, p: Plan, kept: Plan | LazyPlan,
                      fitted: dict[str, int | None] | None) -> None:
        """After the engine's plan `p`: the arrivals told their ETA (the fit's, or this plan's), the
        plan kept for the next creates to fit into, and keep_etas's guards as the ledger keeps them."""
        if self._fits():
            if fitted is None and not self.fit_refused and self.unplanned and any((p.leases[j].eta or now + 1) > now for j in self.unplanned):
                # An arrival that waits, fit not made (no plan kept to fit into): the service's
                # create fits it into the engine's plan of the leases before it (made here).
                # One that starts now waits for nothing: the full plan's "now" is its ETA.
                fit = arrival_fits.fit_arrivals(self, now, running, holds, usage, True)
                if fit is not None:
                    fitted = fit[0]
                    self.inserted += len(fitted)
            self.last_plan, self.book = KeptPlan(kept, self._scores(usage), self._kept_order(kept)), None
        # the API plans a lease when it is created (a full plan, or a fit into the plan): its start is the ETA
        self._told({**{jid: p.leases[jid].eta for jid in self.unplanned}, **(fitted or {})})
        for jid in p.guarded - self.guarded:   # keep_etas: guarded until it starts, as the ledger keeps it
            self.requests[jid] = replace(self.requests[jid], guarded=True)
        if self.settings.keep_etas:
            # settled unless a lease guarded by this plan is late in it (planned with it unguarded, in
            # its last round: the next plan differs); a lease guarded before may stay late, as planned
            self.settled = not any(_late_in(p, self.requests[jid]) for jid in p.guarded - self.guarded)
        self.guarded = p.guarded
        if self.settings.keep_etas:
            # (the tenants left waiting once some start are read when it is checked: _same_order)
            self.settled_scores = self._scores(usage)

    def _head(self, now, running) -> Callable[[], EarlierPlan | None] | None:
        """The head of the last plan that a plan of now places as it did (None: none is read)."""
        if self.earlier is None or any(st + job.duration <= now for job, _hosts, st in running.values()):
            return None   # (a job held past its end: held a second more than the plan counted)
        return self.earlier.head()

    def _made(self, p: Plan | LazyPlan) -> None:
        if self.earlier is not None:
            planning = p.planning if isinstance(p, LazyPlan) else None
            self.earlier.made(planning)

    def _start_now(self, p: Plan | FittedBook, now: int, cluster) -> tuple[list, int | None, bool]:
        """The plan's leases whose start has come, started (out of the queue), its earliest start
        after now, and whether those started came before every lease left in its order. (Of a
        plan reused, the leases it started earlier are skipped.)"""
        starts: list = []
        wake: int | None = None
        later = False   # a lease not starting now came before in the plan's order
        in_order = True
        waiting = self.waiting
        for pl in p.leases.values():
            if pl.lease_id not in waiting:
                continue
            if pl.placement is None or pl.placement.start > now:
                later = True
            if pl.placement is None:
                continue
            if pl.placement.start <= now:
                job = self.waiting.pop(pl.lease_id)
                del self.requests[pl.lease_id]
                self.breached.discard(job.jid)
                shape = (job.gpus_per_vm, job.vms)
                self.shapes[shape] -= 1
                if not self.shapes[shape]:
                    del self.shapes[shape]
                self.tenants[job.tenant] -= 1
                if not self.tenants[job.tenant]:
                    del self.tenants[job.tenant]
                # a lease started now is held where the plan reserved it: the leases after it in the
                # order saw that already, but one before it did not, and may be placed otherwise
                self.settled = self.settled and not later
                in_order = in_order and not later
                self.starts_at[job.jid] = now
                if self.earlier is not None:
                    self.earlier.started(job.jid, now, pl.placement.hosts, now + job.duration)
                if pl.borrowing:
                    self.borrowing.add(job.jid)
                starts.append((job, [cluster.index[h] for h in pl.placement.hosts]))
            elif wake is None or pl.placement.start < wake:
                wake = pl.placement.start
        return starts, wake, in_order

"""One plan's state and its steps per lease (PlanRun): capacity and quota as reserved so
far, and for each lease in the planner's order the first reason it can never be planned,
its earliest start within quota and capacity (a Slot), a borrowed start, its reasons in
words, and the placement reserved (PlanRun.place, the one step plan() and PlanBook.insert
both take). Pure."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from . import scan_index
from .capacity import ModelIndex
from .host_profiles import HostProfiles
from .model import Hold, Host, LeaseRequest, Placement, PlannedLease, QuotaLimit, Reason
from .plan_order import BOUND, FAIR, GUARDED, LeasesAhead, past_wait_bound
from .plan_settings import PlannerSettings
from .plan_words import duration_text, fmt_time, plural
from .quota_book import QuotaBook, QuotaQuestions
from .scan_index import ScanIndex

CapacityIndex = ModelIndex | ScanIndex   # one GPU model's hosts, as a plan asks about them


def _fast_capacity(now: int, hosts: Sequence[Host], holds: Sequence[Hold], empty_together: bool = False
                   ) -> dict[str, CapacityIndex]:
    by_model: dict[str, list[Host]] = defaultdict(list)
    for h in hosts:
        if h.enabled:
            by_model[h.gpu_model].append(h)
    spans: dict[str, dict[str, list[tuple[int, int, int]]]] = {m: defaultdict(list) for m in by_model}
    for hd in holds:
        if hd.end > now and hd.gpus > 0:
            on = spans.get(hd.gpu_model)
            if on is not None:
                on[hd.host].append((hd.start, hd.end, -hd.gpus))
    idx = {m: _index_of(m, hs, now, spans[m], empty_together) for m, hs in by_model.items()}
    for mi in idx.values():
        mi.build()
    return idx


def _index_of(model: str, hosts: Sequence[Host], now: int, spans: Mapping[str, list[tuple[int, int, int]]],
              empty_together: bool) -> CapacityIndex:
    """The compiled scan index where it is built, else the Python index (the same answers:
    tests/property/test_scan_index_agrees.py)."""
    if scan_index.available:
        return ScanIndex(model, hosts, now, spans, empty_together)
    return ModelIndex(model, hosts, now, spans, empty_together)


@dataclass(frozen=True)
class Backend:
    """How a plan builds its capacity index and quota book: the fast ones (FAST, the default) or a
    brute-force reference (bench/naive_planner.py: NAIVE) for the oracle tests and the bench."""
    # (now, hosts, holds, empty_together): PlannerSettings.empty_together is the index's host choice
    capacity: Callable[[int, Sequence[Host], Sequence[Hold], bool], dict[str, CapacityIndex]] = _fast_capacity
    quota: Callable[[int, Mapping[tuple[str, str], QuotaLimit], Sequence[Hold]], QuotaQuestions] = QuotaBook


FAST = Backend()


@dataclass(slots=True)
class Slot:
    """Where a lease can start: the start and hosts (None: nowhere yet), when its quota
    first let it in if that was later than asked, whether capacity pushed it later, and
    whether it borrows beyond its nominal quota."""
    start: int | None = None
    hosts: tuple[str, ...] | None = None
    quota_at: int | None = None
    quota_from: int | None = None   # the start the quota refused first: its window is what blocked
    cap_pushed: bool = False
    borrowing: bool = False


class PlanRun:
    """One plan's state (capacity and quota as reserved so far) and its steps per lease."""

    def __init__(self, now: int, hosts: Sequence[Host], holds: Sequence[Hold],
                 quotas: Mapping[tuple[str, str], QuotaLimit], usage: Mapping[tuple[str, str], float] | None,
                 settings: PlannerSettings, backend: Backend, protected: set[str], planned: Sequence[Hold] = ()):
        """`planned`: placements of the plan itself, as holds (a book rebuilt from a plan, an earlier
        plan's head taken over): held as `holds` are, and to a borrower planned leases, not holds."""
        self.now, self.usage, self.settings, self.protected = now, usage, settings, protected
        held = [*holds, *planned] if planned else holds
        self.indexes: dict[str, CapacityIndex] = backend.capacity(now, hosts, held, settings.empty_together)
        self.book: QuotaQuestions = backend.quota(now, quotas, held)
        self.book.note_planned(planned)   # a borrower pushes none of them back, as none this plan places
        self.hosts = HostProfiles(hosts)
        self.bound_text = _bound_text(settings)   # once: it goes into the reasons of every lease behind the bound
        self.own_text = _own_text(settings)       # once, likewise: why a project's own leases go first
        self.unbinding: set[tuple[str, str]] = set()   # quotas never read (skip_unbinding_quotas)
        self.used_text: dict[tuple[str, str], str] = {}   # explain(): each project's use, in words
        # explain(): reasons (and their parts) that many leases repeat word for word, made once
        self.said: dict[tuple[object, ...], Reason] = {}
        self.capacity_said: dict[tuple[str, int, int, int], str] = {}
        self.charged: Mapping[str, float] = {}   # the queued charges (domain/queued_charge.py), set by the plan

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
                    out = uncounted[key] = mi is None or h.host not in mi.hosts or mi.overcommitted(h.host)
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
            return Reason("duration", f"asks for {duration_text(lr.duration)}; project {p} may hold {m} GPUs for at most "
                                      f"{duration_text(q.max_duration)}")
        if g * n > q.gpus + q.borrow_gpus:
            extra = f" (+{q.borrow_gpus} borrowable)" if q.borrow_gpus else ""
            return Reason("quota", f"needs {g * n} {m} GPUs at once; project {p}'s quota is {q.gpus}{extra}")
        return None

    def earliest_nominal_start(self, lr: LeaseRequest, q: QuotaLimit) -> Slot:
        """The earliest start at or after max(now, its earliest start) at which the project
        is within its nominal quota and the hosts have room, for the whole time it is held."""
        slot = Slot()
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

    def borrow(self, lr: LeaseRequest, q: QuotaLimit, slot: Slot, pl: PlannedLease) -> None:
        """Beyond its nominal quota, up to borrow_gpus, a lease asked for now may start now
        on capacity idle now (never later), when it could not start now within quota, and
        where it pushes back none of its project's leases planned ahead of it (a backfill
        delays no lease ahead)."""
        now, p, m = self.now, lr.project_id, lr.gpu_model
        if not (q.borrow_gpus > 0 and max(now, lr.earliest_start) == now
                and (slot.start is None or slot.start > now)):
            return
        need, d = lr.gpus_per_vm * lr.instances, lr.duration + self.settings.release_allowance
        left = self.book.min_remaining(p, m, now, now + d)
        if left + q.borrow_gpus < need:
            return
        if self.book.overtakes(p, m, now, now + d, need):
            pl.reasons.append(Reason("quota", f"may not borrow idle {m} GPUs now: project {p}'s leases planned "
                                              f"ahead of it would then wait for its end"))
            return
        r = self.indexes[m].earliest(now, d, lr.gpus_per_vm, lr.instances)
        if r is None or r[0] != now:
            return
        slot.start, slot.hosts = r
        slot.borrowing = True
        pl.reasons.append(Reason("borrowing", f"runs beyond project {p}'s {m} quota on idle capacity: "
                                              f"{q.gpus - left + need} of {q.gpus} GPUs (may borrow {q.borrow_gpus})"))

    def explain(self, lr: LeaseRequest, q: QuotaLimit, slot: Slot, ahead: LeasesAhead, tier: int,
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
        said = self.said
        if ahead.priority:
            r = said.get(("priority", ahead.priority))
            if r is None:
                r = said[("priority", ahead.priority)] = Reason(
                    "priority", f"behind {plural(ahead.priority, 'lease')} of higher priority")
            out.append(r)
        if tier == GUARDED:
            assert lr.first_eta is not None   # guardable
            behind = f"; behind {plural(ahead.order, 'lease')} told an earlier ETA" if ahead.order else ""
            out.append(Reason("order", f"keeps the ETA it was first told, {fmt_time(lr.first_eta)}, so it goes "
                                       f"before fair share{behind}"))
        elif ahead.guarded:
            out.append(Reason("order", f"{plural(ahead.guarded, 'lease')} keeping the ETA "
                                       f"{'it was' if ahead.guarded == 1 else 'they were'} first told go first"))
        if aged:
            behind = f"; behind {plural(ahead.order, 'lease')} that reached it earlier" if ahead.order else ""
            out.append(Reason("order", f"has waited {self.bound_text}, so it goes before fair share{behind}"))
        elif ahead.bound:
            out.append(Reason("order", f"leases that have waited {self.bound_text} go before fair share; "
                                       f"{ahead.bound} of them {'is' if ahead.bound == 1 else 'are'} ahead"))
        if tier == FAIR and settings.bounded and past_wait_bound(lr, now, settings):
            out.append(Reason("order", f"has waited {self.bound_text}, but only "
                                       f"{_first(settings.wait_bound_leases)} before fair share; "
                                       f"its turn comes as those start"))
        if ahead.fairshare:
            out.append(self._fairshare_reason(lr, q, ahead.fairshare))
        if ahead.own:
            out.append(Reason("order", f"behind {plural(ahead.own, 'lease')} of its own project that "
                                       f"{'goes' if ahead.own == 1 else 'go'} first: {self.own_text}"))
        if ahead.order and tier == FAIR:
            r = said.get(("order", ahead.order))
            if r is None:
                r = said[("order", ahead.order)] = Reason(
                    "order", f"behind {plural(ahead.order, 'lease')} submitted earlier")
            out.append(r)
        t0 = max(now, lr.earliest_start)
        if t0 > now:
            out.append(Reason("order", f"asked to start no earlier than {fmt_time(t0)}"))
        if slot.quota_at is not None and slot.quota_from is not None:
            t1 = slot.quota_from
            held = q.gpus - self.book.min_remaining(p, m, t1, t1 + lr.duration + settings.release_allowance)
            out.append(Reason("quota", f"project {p} holds {held} of {q.gpus} {m} GPUs until "
                                       f"{fmt_time(slot.quota_at)} (this lease needs {need})"))
        if slot.cap_pushed:
            g, n, largest = lr.gpus_per_vm, lr.instances, self.indexes[m].largest_free_now()
            what = self.capacity_said.get((m, g, n, largest))
            if what is None:
                what = self.capacity_said[(m, g, n, largest)] = (
                    f"needs {g} {m} on one host" if n == 1
                    else f"needs {n} VMs of {g} {m} at the same time, each on one host"
                ) + f"; the largest free block now is {largest}; earliest at "
            out.append(Reason("capacity", what + fmt_time(T)))

    def _fairshare_reason(self, lr: LeaseRequest, q: QuotaLimit, ahead: int) -> Reason:
        """Why `ahead` leases of projects of a lower fair-share score go first. Without the queued
        charge (which counts per lease) it is the same for all of a project's leases that far
        back, so made once: thousands of leases repeat it."""
        settings, p, m = self.settings, lr.project_id, lr.gpu_model
        key = ("fairshare", p, m, ahead)
        if settings.queued_charge is None and (r := self.said.get(key)) is not None:
            return r
        used = self.used_text.get((p, m))
        if used is None:
            u = self.usage.get((p, m), 0.0) if self.usage else 0.0
            used = self.used_text[(p, m)] = (f"project {p} has used {_gh(u)} {m} GPU-hours recently "
                                             f"against weight {q.weight:g}")
        by_age = settings.age_size_gpu_hours is not None
        if settings.queued_charge is not None:
            waited = ", or that waited more GPU-hours (age x size)," if by_age else ""
            return Reason("fairshare", f"{used}{self._charge_text(lr, q)}; {plural(ahead, 'lease')} of projects "
                                       f"that used or committed less (in all, over weight){waited} go first")
        waited = " (or that waited more GPU-hours: age x size)" if by_age else ""
        r = self.said[key] = Reason("fairshare", f"{used}; {plural(ahead, 'lease')} of projects that used "
                                                 f"less{waited} go first")
        return r

    def _charge_text(self, lr: LeaseRequest, q: QuotaLimit) -> str:
        """What the queued charge counts against this lease (queued_charge._charged, undone)."""
        K, spares = self.settings.queued_charge, self.settings.queued_charge_spares_gpus
        assert K is not None
        c = self.charged.get(lr.lease_id, 0.0)
        if c > 0:
            return (f", and holds or has queued {_gh(c * q.weight / K)} more ahead of this lease, "
                    f"counted {K:g}x (the queued charge)")
        if spares is not None and lr.gpus_per_vm >= spares:
            return f"; this lease, of {spares} GPUs per VM or more, is spared the queued charge"
        return ", and holds or has queued nothing ahead of this lease (the queued charge)"

    def place(self, lr: LeaseRequest, q: QuotaLimit | None, ahead: LeasesAhead, tier: int, pl: PlannedLease,
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

    def reserve(self, lr: LeaseRequest, slot: Slot, pl: PlannedLease) -> None:
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


def _place_preemptible(now: int, lr: LeaseRequest, pl: PlannedLease, mi: CapacityIndex, ahead: int,
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
            pl.reasons.append(Reason("order", f"behind {plural(ahead, 'lease')} of its GPU model"))
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


def _own_text(s: PlannerSettings) -> str:
    """Why a project's own lease goes before another of its: what can lower its score alone."""
    why = []
    if s.queued_charge is not None:
        why.append("asked earlier (the queued charge grows along a project's queue)")
        why.append("preemptible (never charged)")
        if s.queued_charge_spares_gpus is not None:
            why.append(f"of {s.queued_charge_spares_gpus} GPUs per VM or more (spared the queued charge)")
    if s.age_size_gpu_hours is not None:
        why.append("waited more GPU-hours (age x size)")
    return ", or ".join(why)


def _bound_text(settings: PlannerSettings) -> str:
    """The wait bound in words: "4 hours or more", "32 GPU-hours or more", or both."""
    parts = []
    if settings.wait_bound is not None:
        parts.append(f"{duration_text(settings.wait_bound)} or more")
    if settings.wait_bound_gpu_hours is not None:
        parts.append(f"{settings.wait_bound_gpu_hours:g} GPU-hours (its GPUs times the hours it waited) or more")
    return ", or ".join(parts)

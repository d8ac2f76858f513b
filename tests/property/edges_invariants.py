"""The promises at the edges of a lease, as plain functions over what the database
(and the simulated cloud) hold after a step. Each returns (checks made, violations
in words naming the host or lease and the instant); the driver adds seed and step.

"Held": a VM's GPUs are held over its allocation's window, and at least until the
cloud has confirmed their release (the lease's server row is not DELETED yet),
whatever the lease's state."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import func, select

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.states import FINAL, RESERVING
from gpu_tenancy.timeutil import rfc3339

HOLDING_NAMES = {s.value for s in RESERVING}   # with a parked lease's held slot
FINAL_NAMES = [s.value for s in FINAL]
# states whose lease may have VMs holding GPUs in the cloud (a parked lease's are offloaded)
LIVE = {"provisioning", "active", "ending", "parking", "resuming"}
STARTING = ("provisioning", "resuming")   # a start under way, failed boot_timeout after it began


@dataclass(frozen=True)
class Lease:
    id: str
    status: str
    project: str
    model: str
    preemptible: bool
    earliest: int
    start: int | None
    end: int | None
    eta: int | None
    early_end: int | None
    borrowing: bool
    early_end_for: str | None = None   # the lease its notice makes room for


@dataclass(frozen=True)
class Span:
    """GPUs one VM holds on a host over [start, end)."""
    lease: str
    vm: int
    host: str
    gpus: int
    start: int
    end: int
    unreleased: bool = False   # a VM whose GPUs the cloud has not released yet (held now)
    since: int | None = None   # a VM dropped from a re-placed lease: when its delete was asked for

    def __str__(self):
        return f"lease {self.lease[:8]} vm{self.vm} {self.gpus} GPUs [{rfc3339(self.start)}, {rfc3339(self.end)})"


@dataclass
class Snapshot:
    now: int
    hosts: dict[str, tuple[str, int, bool]]      # name -> (model, GPUs, open to new leases)
    limits: dict[tuple[str, str], int]           # (project, model) -> quota + borrow
    leases: dict[str, Lease]                     # the unfinished ones, in arrival order
    spans: list[Span]
    unreleased: dict[str, tuple[str, int, str]]  # cloud server id -> (lease, vm, host) the ledger still holds
    committed: dict[str, int]                    # holding lease -> when it was (last) scheduled
    events: list[tuple[int, str, int, int]] = field(default_factory=list)   # new: (id, lease, at, lease created)
    owners: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # lease -> (project, model, preemptible)
    # (lease, VM, host) of a lease that has not run yet -> that VM's planned end there when last seen
    # booting (the driver's: its boot hung past that end, the lease was placed again, and its end moved)
    booting_ends: dict[tuple[str, int, str], int] = field(default_factory=dict)
    # lease still starting (provisioning, resuming) -> when its start fails, boot_timeout after it began:
    # the ledger holds its GPUs till then past its end (engine/ledger.py: load_allocations)
    start_deadlines: dict[str, int] = field(default_factory=dict)
    # (lease, VM, host) as booting_ends -> its lease's start deadline then (the driver's, while it booted)
    booting_deadlines: dict[tuple[str, int, str], int] = field(default_factory=dict)


def read(sessions, now: int, after_event: int, boot_timeout: int | None = None) -> Snapshot:
    with sessions() as s:
        hosts = {h.name: (h.gpu_model, h.gpus, h.up and h.enabled and not h.drained) for h in s.scalars(select(m.Host))}
        limits = {(q.project_id, q.gpu_model): q.gpus + q.borrow_gpus for q in s.scalars(select(m.Quota))}
        L = m.Lease
        leases = {r.id: Lease(r.id, r.status, r.project_id, r.gpu_model, r.preemptible, to_epoch(r.earliest_start),
                              to_epoch(r.start_at), to_epoch(r.end_at), to_epoch(r.queue_eta), to_epoch(r.early_end_at),
                              r.borrowing, r.early_end_for)
                  for r in s.execute(select(L.id, L.status, L.project_id, L.gpu_model, L.preemptible, L.earliest_start,
                                            L.start_at, L.end_at, L.queue_eta, L.early_end_at, L.borrowing,
                                            L.early_end_for)
                                     .where(L.status.not_in(FINAL_NAMES)).order_by(L.created_at, L.id))}
        a = m.Allocation
        allocs = s.execute(select(a.lease_id, a.vm_index, a.host, a.gpus, a.start_at, a.end_at)
                           .join(L).where(L.status.in_(HOLDING_NAMES))).all()
        gpus = {r.id: r.gpus_per_vm for r in s.execute(select(L.id, L.gpus_per_vm).where(L.status.in_(LIVE)))}
        sv = m.Server
        # an offloaded VM holds no GPUs, though its lease, ending from parking, has yet to delete it
        servers = s.execute(select(sv.lease_id, sv.vm_index, sv.host, sv.cloud_id).join(L).where(
            L.status.in_(LIVE), sv.cloud_id.is_not(None), sv.status.not_in(("DELETED", "SHELVED_OFFLOADED")))).all()
        rg = m.ReleasingGpus   # VMs dropped from a re-placed lease, their GPUs not released yet
        releasing = s.execute(select(rg.lease_id, rg.vm_index, rg.host, rg.gpus, rg.cloud_id, rg.since)).all()
        owners = {r.id: (r.project_id, r.gpu_model, r.preemptible) for r in s.execute(
            select(L.id, L.project_id, L.gpu_model, L.preemptible).where(L.id.in_({r.lease_id for r in releasing})))}
        e = m.Event
        # a parked lease's held slot is committed when it parks
        committed = dict(s.execute(select(e.lease_id, func.max(e.at)).join(L).where(
            L.status.in_(HOLDING_NAMES), e.to_state.in_(("scheduled", "parked"))).group_by(e.lease_id)).all())
        events = s.execute(select(e.id, e.lease_id, e.at, L.created_at).join(L).where(e.id > after_event)
                           .order_by(e.id)).all()
        starting = {lease.id: lease.status for lease in leases.values() if lease.status in STARTING}
        entered = s.execute(select(e.lease_id, e.to_state, func.max(e.at)).where(
            e.lease_id.in_(starting), e.to_state.in_(STARTING)).group_by(e.lease_id, e.to_state)).all() \
            if starting and boot_timeout is not None else []
    spans = [Span(r.lease_id, r.vm_index, r.host, r.gpus, to_epoch(r.start_at), to_epoch(r.end_at)) for r in allocs]
    covered = {(sp.lease, sp.vm, sp.host) for sp in spans if sp.start <= now < sp.end}
    for r in servers:   # not yet released: held now, whatever its allocation says
        if (r.lease_id, r.vm_index, r.host) not in covered:
            spans.append(Span(r.lease_id, r.vm_index, r.host, gpus[r.lease_id], now, now + 1, True))
    spans += [Span(r.lease_id, r.vm_index, r.host, r.gpus, now, now + 1, True, to_epoch(r.since)) for r in releasing]
    unreleased = {r.cloud_id: (r.lease_id, r.vm_index, r.host) for r in [*servers, *releasing]}
    deadlines = {lease: to_epoch(at) + boot_timeout for lease, state, at in entered if starting[lease] == state}
    return Snapshot(now, hosts, limits, leases, spans, unreleased,
                    {lease: to_epoch(at) for lease, at in committed.items()},
                    [(r.id, r.lease_id, to_epoch(r.at), to_epoch(r.created_at)) for r in events], owners,
                    start_deadlines=deadlines)


def _peaks(now: int, spans: list[Span]):
    """(instant, GPUs, spans) at every instant from now on where the sum can rise."""
    for t in sorted({now} | {sp.start for sp in spans if sp.start > now}):
        live = [sp for sp in spans if sp.start <= t < sp.end]
        yield t, sum(sp.gpus for sp in live), live


def late_release(snap: Snapshot, live: list[Span], limit: int, allowance: int, on_host: bool) -> bool:
    """The over-commit no planner can avoid: the cloud releases a lease's GPUs later than
    planned (a slow or failing delete, a stuck boot), and the leases committed, before that,
    to follow on them are already due. True if some unreleased VMs in `live` are late (past
    their lease's end plus the allowance; a VM dropped from a re-placed lease, past the moment
    its delete was asked for plus the allowance: the engine's plan holds it until then,
    engine/held.releasing, and may commit a lease onto it from then, in that very step; or past its
    VM's planned end there, if that came first and the lease had not run: a boot that hung past its
    planned end, then timed out, and the lease placed again), every other
    lease there was committed before the first of those instants, and without the late VMs
    the sum is within `limit` (the plan was), as it is without the waiting leases on a host
    (scheduled, not booted, or parked at its slot), or without the late VMs in a quota (a
    project's next lease runs; its last one is being deleted)."""
    def due(sp: Span, known: bool = False) -> int:
        """When the VM was planned to give its GPUs back; `known`: as the ledger holds a lease still
        starting past its end, till its start's deadline (Snapshot.start_deadlines, booting_deadlines)."""
        if sp.since is None:
            end = snap.leases[sp.lease].end or snap.now
            return (max(end, snap.start_deadlines.get(sp.lease, end)) if known else end) + allowance
        # not for a lease that ran: a running lease's VMs are not late at its end when its host went
        # down (it is re-placed then only if its time is not up: engine/host_failure.py, time_is_up)
        key = (sp.lease, sp.vm, sp.host)
        booting_end = snap.booting_ends.get(key)
        if booting_end is not None and known:
            booting_end = max(booting_end, snap.booting_deadlines.get(key, booting_end))
        return (sp.since if booting_end is None else min(sp.since, booting_end)) + allowance

    late = [sp for sp in live if sp.unreleased and due(sp) <= snap.now]
    if not late:
        return False
    first = min(map(due, late))
    # a lease committed onto them after they were late was planned past the deadline the ledger holds
    # a lease still starting to: tolerated once that has passed too (a release later than it); any
    # other VM late when a lease was committed onto it is an over-commit, as before
    def deadline_known(sp: Span) -> bool:
        return (sp.lease in snap.start_deadlines if sp.since is None
                else (sp.lease, sp.vm, sp.host) in snap.booting_deadlines)
    known = all(map(deadline_known, late)) and max(due(sp, known=True) for sp in late) <= snap.now
    others = [sp for sp in live if not sp.unreleased]
    if not all(snap.committed.get(sp.lease, snap.now) < first or known for sp in others):
        return False
    used = sum(sp.gpus for sp in live)
    # a parked lease at its slot waits for the GPUs as a scheduled one does (engine/resume.py: begin_resume)
    spare = ([sp for sp in others if snap.leases[sp.lease].status in ("scheduled", "parked")] if on_host
             else late)
    return bool(spare) and used - sum(sp.gpus for sp in late) <= limit and used - sum(sp.gpus for sp in spare) <= limit


def overcommit(snap: Snapshot, allowance: int, tolerated: list[str]) -> tuple[int, list[str]]:
    """(a) No host holds more GPUs than it has, now or at any planned instant
    (a late release excepted: late_release; those go to `tolerated`)."""
    by_host, checks = defaultdict(list), 0
    bad: list[str] = []
    for sp in snap.spans:
        by_host[sp.host].append(sp)
    for host, spans in sorted(by_host.items()):
        for t, used, live in _peaks(snap.now, spans):
            checks += 1
            if used > snap.hosts[host][1]:
                text = (f"host {host} holds {used} of {snap.hosts[host][1]} GPUs at {rfc3339(t)}: "
                        + "; ".join(map(str, live)))
                late = t == snap.now and late_release(snap, live, snap.hosts[host][1], allowance, True)
                (tolerated if late else bad).append(text)
    return checks, bad


def cloud_agrees(snap: Snapshot, holders, free: dict[str, int]) -> tuple[int, list[str]]:
    """(a) The cloud never has more GPUs in use than a host has, and every GPU it still
    holds on a host open to new leases is held in the ledger too (else the planner
    hands it on and the next boot there finds no valid host)."""
    bad = [f"the cloud has {-n} GPUs too many in use on {h}" for h, n in sorted(free.items()) if n < 0]
    held_now = {(sp.lease, sp.vm, sp.host) for sp in snap.spans if sp.start <= snap.now < sp.end}
    for server, lease, vm, host, gpus in holders:
        if not snap.hosts[host][2] or server in snap.unreleased or (lease, vm, host) in held_now:
            continue
        status = snap.leases[lease].status if lease in snap.leases else "finished"
        bad.append(f"the cloud still holds {gpus} GPUs on {host} for server {server[:8]} (lease {lease[:8]} vm{vm}, "
                   f"{status}) at {rfc3339(snap.now)}, which the ledger counts as free")
    return len(free) + len(holders), bad


def lease_inventory(snap: Snapshot, inventory: dict[str, dict[str, int]]) -> tuple[int, list[str]]:
    """(f) No lease's class has inventory outside its window: only a lease that holds GPUs in
    the ledger (scheduled after a re-placement, provisioning, active or ending) has units in
    the cloud (none while parked)."""
    holding = ("scheduled", "provisioning", "active", "ending", "parking", "resuming")
    bad = []
    for lease, hosts in sorted(inventory.items()):
        status = snap.leases[lease].status if lease in snap.leases else "finished"
        if status not in holding:
            bad.append(f"lease {lease[:8]} ({status}) still has inventory {hosts} at {rfc3339(snap.now)}")
    return len(inventory) + 1, bad


def no_valid_host(boots) -> tuple[int, list[str]]:
    """(b) No boot is refused for want of GPUs the ledger gave it (faults the test
    injected, and hosts it took down, excepted)."""
    return len(boots), [f"boot of lease {b.lease_id[:8]} vm{b.vm_index} on {b.host} at {rfc3339(b.at)} refused "
                        f"(No valid host): its GPUs were held by " + ("; ".join(b.holders) or "nothing")
                        for b in boots if b.refused == "full"]


def quotas(snap: Snapshot, allowance: int, tolerated: list[str]) -> tuple[int, list[str]]:
    """(c) No project holds more GPUs of a model than its quota plus borrowing allow,
    now or at any planned instant (preemptible leases are outside quota; a late
    release excepted: late_release; those go to `tolerated`)."""
    by_key, checks = defaultdict(list), 0
    bad: list[str] = []
    for sp in snap.spans:
        lease = snap.leases.get(sp.lease)
        project, model, preemptible = (lease.project, lease.model, lease.preemptible) if lease else snap.owners[sp.lease]
        if not preemptible:
            by_key[(project, model)].append(sp)
    for key, spans in sorted(by_key.items()):
        limit = snap.limits.get(key, 0)
        for t, used, live in _peaks(snap.now, spans):
            checks += 1
            if used > limit:
                text = f"project {key[0]} holds {used} {key[1]} GPUs at {rfc3339(t)}, over its {limit}: " + \
                    "; ".join(map(str, live))
                (tolerated if t == snap.now and late_release(snap, live, limit, allowance, False) else bad).append(text)
    return checks, bad


def etas(snap: Snapshot) -> tuple[int, list[str]]:
    """(d) A waiting lease's ETA (a planned one's start) is never before the start it asked
    for, and a queued lease's ETA, once the engine has planned, never in the past."""
    checks, bad = 0, []
    for lease in snap.leases.values():
        when = promised_start(lease)
        if when is None:
            continue
        checks += 1
        if when < lease.earliest or (lease.status == "queued" and when < snap.now):
            bad.append(f"lease {lease.id[:8]} ({lease.status}) says it starts at {rfc3339(when)}; it asked for "
                       f"{rfc3339(lease.earliest)} and it is {rfc3339(snap.now)}")
    return checks, bad


def promised_start(lease: Lease) -> int | None:
    return lease.eta if lease.status == "queued" else lease.start if lease.status == "scheduled" else None


def released_late(before: Snapshot, after: Snapshot, lease_id: str, promised: int, allowance: int) -> Span | None:
    """A VM of another lease, on a host of the lease's GPU model, still unreleased when the
    step began though due (its end, or its delete for a re-placed lease's, plus the
    allowance) by the ETA `promised`: its release came later than planned, so the ETA
    built on it could not be kept. (By model, not host: a lease that waited may have run
    and ended within the step, leaving no allocation to say where.)"""
    model = before.leases[lease_id].model
    for sp in before.spans:
        owner = before.leases.get(sp.lease)
        ended = sp.since if sp.since is not None else owner.end if owner and owner.end else None
        if ended is None:
            continue
        due = ended + allowance
        if (sp.unreleased and sp.lease != lease_id and before.hosts.get(sp.host, ("",))[0] == model
                and before.now < due <= promised):
            return sp
    return None


def kept_etas(before: Snapshot, after: Snapshot, booted: dict[str, int], allowance: int,
              idle_only: set[str], borrowed: set[str], tolerated: list[str]) -> tuple[int, list[str]]:
    """(d) Over a quiet step (nothing arrived, nothing failed, no fault in play), a lease
    that got its GPUs did so no later than the ETA it had before the step, and no
    earlier than that ETA less the release allowance, unless it runs on idle GPUs only
    (`idle_only`: preemptible). Leases of a GPU model on which a lease started by
    borrowing in the step (`borrowed`) are left out: borrowing is decided on capacity
    idle now only, so no ETA foresees it. A lease late because GPUs it was planned onto
    were released later than their end plus the allowance (released_late) goes to
    `tolerated`, as the over-commits of a late release do. Each lease of the model that
    got GPUs and was gone within the step, before this one's, is one more release that can
    come up to the allowance early (a chain of short leases), so one more allowance of
    earliness. `booted`: lease -> when the cloud took its last VM's boot."""
    checks = 0
    bad: list[str] = []
    for lease_id, at in sorted(booted.items()):
        lease = before.leases.get(lease_id)
        promised = promised_start(lease) if lease else None
        started = after.leases.get(lease_id)
        if (lease is None or promised is None or (started and started.status in ("queued", "scheduled"))
                or lease.model in borrowed):
            continue   # no ETA, sent back to wait (a retry), or a borrower took GPUs of its model
        checks += 1
        if at > promised:
            text = f"lease {lease_id[:8]} got its GPUs at {rfc3339(at)}, {at - promised} s after its ETA " \
                   f"{rfc3339(promised)}"
            late = released_late(before, after, lease_id, promised, allowance)
            (tolerated if late else bad).append(text + (f": {late} was released late" if late else ""))
            continue
        chained = sum(1 for other, t in booted.items() if t < at and other not in after.leases
                      and other in before.leases and before.leases[other].model == lease.model)
        if promised - at > allowance * (1 + chained) and lease_id not in idle_only:
            bad.append(f"lease {lease_id[:8]} got its GPUs at {rfc3339(at)}, {promised - at} s before its ETA "
                       f"{rfc3339(promised)} (release allowance {allowance} s, {chained} released before it "
                       f"in the step)")
    return checks, bad


def stamps(snap: Snapshot, last_at: dict[str, int]) -> tuple[int, list[str]]:
    """No event is stamped before the lease it records existed, before the lease's
    previous event, or in the future. `last_at` (lease -> its latest event) is updated."""
    bad = []
    for event_id, lease, at, created in snap.events:
        floor = max(created, last_at.get(lease, created))
        if at < floor or at > snap.now:
            bad.append(f"event {event_id} of lease {lease[:8]} is stamped {rfc3339(at)}: the lease was created "
                       f"{rfc3339(created)}, its previous event {rfc3339(last_at.get(lease, created))}, "
                       f"and it is {rfc3339(snap.now)}")
        last_at[lease] = max(at, last_at.get(lease, at))
    return len(snap.events), bad

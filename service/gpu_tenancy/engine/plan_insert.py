"""A new lease fitted into the current plan (domain/plan_insert.py), under the ledger lock,
instead of a full replan: what lets `POST /v1/leases` keep its pace with thousands waiting.
The engine's replan (each tick, and woken after creates: one replan for many) then plans
every lease again in full. See docs/design.md, "Incremental create".

The plan lives in the rows: each waiting lease's start_at, end_at and planned_hosts (written
by every replan, ledger.write_queue_info, and by each fit here). Each process keeps the
plan built as a PlanBook (Snapshot) while the ledger has not replanned since (its
`generation`); leases other processes fitted in meanwhile (the ledger's `inserted` count,
their `plan_seq`) are read and added to it, so a create reads a few rows, not the queue."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from typing import Any, Callable

from sqlalchemy import BigInteger, String, bindparam, cast, extract, or_, select, update
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.domain.model import LeaseRequest, Placement
from gpu_tenancy.domain.plan_insert import Planned, PlanBook
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import ledger, start_by_margins
from gpu_tenancy.engine.lease_insert import LOCKS
from gpu_tenancy.engine.metrics import CREATE_REPLANS

S = LeaseState
log = logging.getLogger(__name__)
L = m.Lease


def epoch(column: Any) -> Any:
    """A time column as the database's whole seconds since the epoch: what to_epoch gives for
    the whole-second times the service writes (PostgreSQL's cast would round a fraction where
    to_epoch truncates). Converting 10,000 rows' five times in Python was a third of a build."""
    return cast(extract("epoch", column), BigInteger).label(column.key)


# what a lease of the plan is read with: its ask, and where the plan has it
# (planned_hosts as its JSON text: every column a plain value, so a row is its own memo key)
COLUMNS = (L.id, L.project_id, L.gpu_model, L.gpus_per_vm, L.instances, L.duration, epoch(L.earliest_start),
           epoch(L.latest_start), epoch(L.created_at), L.priority, L.name, L.preemptible, L.arrival,
           epoch(L.start_at), epoch(L.end_at), cast(L.planned_hosts, String).label("planned_hosts"), L.borrowing,
           L.plan_seq)


@dataclass
class Snapshot:
    generation: int
    inserted: int     # the ledger's count of fits it holds
    made_at: int
    allowance: int
    book: PlanBook
    recent: str | None = None   # the ledger's last fits with this one, to write with it (Recent.with_fit)


@dataclass
class InsertCache:
    """One per app (each process its own): the plan as last built or fitted into here."""
    min_waiting: int   # with fewer leases in the plan, a create replans in full (cheap then, and exact)
    max_age: int = 60  # s: time moving on moves the plan (holds past their end, starts come)
    last: Snapshot | None = field(default=None)
    # the last build's leases by their row: a replan moves few, so the next build converts only those
    known: dict[tuple, Planned] = field(default_factory=dict)

    def confirm(self, snapshot: Snapshot) -> None:
        """The fit's transaction committed: the snapshot (with it) is the plan again."""
        self.last = snapshot


BeforeFit = Callable[[Session, PlanBook, m.Lease], None]


def fit_made(session: Session, clock: Callable[[], int], settings: PlannerSettings, row: m.Lease,
             cache: InsertCache, before: BeforeFit | None = None) -> Snapshot | None:
    """In the transaction that makes `row` (queued, flushed, not yet committed: no replan can
    have planned it), under the ledger lock taken here: the lease fitted into the current
    plan, its queue information written; the snapshot to confirm once that transaction has
    committed. None: a full replan must plan it once committed (the plan is short or not
    known here, a wait bound, age x size or keep_etas is set, the lease would start now or exactly
    when asked, which commits GPUs: only the full replan does that, or it has no room after every
    lease of the plan). `before` is called with the plan the
    lease is fitted into, without it (before the lock when no fit committed meanwhile). The
    clock is read again once the lock is held: a create that waited there is fitted at the time
    it is fitted, so its ETA is not early by the wait."""
    # the ledger's counts as the ask's checks read them in this transaction (engine/ask_facts.py),
    # else read below: either way before the lock, and the claim reads them again under it
    counts = session.info.pop(LEDGER_COUNTS, None)
    margin = session.info.pop(START_BY_MARGIN, None)   # the project's start-by margin, read with them
    if not settings.fits_one_by_one:
        return None
    now = clock()
    snapshot, cache.last = cache.last, None   # until this fit commits, the plan here is not known
    # Before the lock, so that no create waits on it: the plan built again (after a replan, or
    # when old), or the fits committed since added; under the lock, only those committed meanwhile.
    generation, inserted = counts if counts is not None else session.execute(COUNTS).one()
    snapshot = catch_up(session, now, settings, cache, snapshot, generation, inserted)
    if snapshot is None:
        return None
    # `before` sees the plan the lease is fitted into, without it: called here, before the lock,
    # and again under it only if fits committed meanwhile changed that plan
    seen = call_before(before, session, snapshot, row, None)
    generation, seq, recent = claim(session)
    now = clock()
    snapshot = catch_up(session, now, settings, cache, snapshot, generation, seq - 1,
                        recent.since(snapshot.inserted, seq - 1))
    if snapshot is None:
        return None
    lr = ledger.request_from_row(row)
    try:
        call_before(before, session, snapshot, row, seen)
        fitted = snapshot.book.insert(now, lr)
    except Exception:   # the lease is made all the same; the full replan plans it
        log.exception("fitting lease %s into the plan failed", row.id)
        return None
    place = fitted.planned.placement
    if place is None or place.start <= now or place.start == lr.earliest_start:
        # the full replan commits it (and is the one to decide reclaims); with no room after every
        # lease of the plan, it finds where the lease goes in its order (a borrower may start now)
        return None
    ledger.write_queue_info(row, fitted.planned, now,
                            start_by_margins.basis_now(session, row.project_id) if margin is None else margin)
    row.plan_seq = snapshot.inserted = seq
    snapshot.recent = recent.with_fit(seq, row)
    CREATE_REPLANS.labels("fitted").inc()
    return snapshot


def call_before(before: BeforeFit | None, session: Session, snapshot: Snapshot, row: m.Lease,
                seen: tuple[PlanBook, int] | None) -> tuple[PlanBook, int] | None:
    """`before` called with the snapshot's plan, unless it was with that plan as it is (`seen`)."""
    now_seen = (snapshot.book, snapshot.inserted)
    if before is not None and (seen is None or seen[0] is not now_seen[0] or seen[1] != now_seen[1]):
        before(session, snapshot.book, row)
    return now_seen


COUNTS = select(m.Lock.generation, m.Lock.inserted).where(m.Lock.name == "ledger")
LEDGER_COUNTS = "ledger_counts"   # the key of COUNTS' answer in session.info, when read already
START_BY_MARGIN = "start_by_margin"   # and of the project's start-by margin


def claim(session: Session) -> tuple[int, int, Recent]:
    """The ledger lock (as db.session.ledger_lock takes it: the row's lock on PostgreSQL, the
    database's write lock on SQLite), taken by counting one more fit: the ledger's generation,
    this fit's number and the last fits (as the row is once the lock is had). One statement: a
    create's round trips under the lock are most of its time. A fit that does not happen leaves
    its number unused (readers skip the gap)."""
    # on the connection, not the session: the ORM's bulk UPDATE (its synchronizing of loaded Lock
    # objects, none in a create) was half the claim's CPU
    generation, seq, recent = session.connection().execute(CLAIM).one()
    return generation, seq, Recent.of(recent)


# built once: building the statement was a third of its time in a create
CLAIM = (update(LOCKS).where(LOCKS.c.name == "ledger").values(inserted=LOCKS.c.inserted + 1)
         .returning(LOCKS.c.generation, LOCKS.c.inserted, LOCKS.c.recent))
NAMES = [c.key for c in COLUMNS]   # a fit's row, as Recent keeps it: these, in this order


@dataclass(frozen=True)
class Recent:
    """The ledger's last fits (at most KEPT), kept in its lock row (locks.recent, as JSON) by
    each fit's own write (engine/lease_insert.py: commit_fitted, PostgreSQL only), so that the
    claim that waited for the lock reads the fits committed meanwhile with it, not in a
    statement of its own. Every fit numbered from `first` to `last` is in `fits`: a gap in the
    numbers (a claim that fitted nothing, a process that does not keep them) starts them again,
    and a claim that finds the fits it needs not all here reads them from the rows."""
    first: int = 0
    last: int = -1
    fits: tuple[tuple, ...] = ()   # rows of COLUMNS' values, by plan_seq

    KEPT = 16

    @classmethod
    def of(cls, text: str | None) -> Recent:
        if not text:
            return cls()
        kept = json.loads(text)
        return cls(kept["first"], kept["last"], tuple(tuple(f) for f in kept["fits"]))

    def since(self, after: int, upto: int) -> list[Any] | None:
        """The fits numbered after `after` up to `upto`, as rows read by FITTED_SINCE; None
        unless all of them are here."""
        if self.last != upto or self.first > after + 1:
            return None
        seq = NAMES.index("plan_seq")
        return [KeptFit(zip(NAMES, f)) for f in self.fits if f[seq] > after]

    def with_fit(self, seq: int, row: m.Lease) -> str:
        """These and the fit numbered `seq` (of `row`, its queue place written), as JSON."""
        mine = tuple(seq if name == "plan_seq" else kept_value(name, getattr(row, name)) for name in NAMES)
        fits, first = ((*self.fits, mine), self.first) if self.last == seq - 1 else ((mine,), seq)
        fits = fits[-self.KEPT:]
        seq_at = NAMES.index("plan_seq")
        return json.dumps({"first": max(first, fits[0][seq_at]), "last": seq, "fits": fits})


def kept_value(name: str, value: Any) -> Any:
    """A lease row's value as a row of COLUMNS reads it (times as epoch seconds, hosts as JSON)."""
    if name in EPOCHS:
        return to_epoch(value)
    if name == "planned_hosts":
        return json.dumps(value) if value is not None else None
    return bool(value) if name == "borrowing" else value


EPOCHS = {"earliest_start", "latest_start", "created_at", "start_at", "end_at"}   # epoch(...) in COLUMNS


class KeptFit(dict):
    """A fit kept by Recent, read as a row of COLUMNS is (by attribute), or of FITTED_SINCE: a
    fit's lease is queued (a cancel's number is never kept: the gap it leaves is read from the rows)."""
    __getattr__ = dict.__getitem__
    status = S.QUEUED.value


def fresh(snapshot: Snapshot | None, now: int, cache: InsertCache, generation: int, inserted: int) -> bool:
    """The snapshot is the ledger's plan but for fits made since (no replan since, not old)."""
    return (snapshot is not None and snapshot.generation == generation and snapshot.inserted <= inserted
            and 0 <= now - snapshot.made_at < cache.max_age)


def catch_up(session: Session, now: int, settings: PlannerSettings, cache: InsertCache,
             snapshot: Snapshot | None, generation: int, inserted: int,
             since: list[Any] | None = None) -> Snapshot | None:
    """The snapshot with the fits made since it was read (the first `inserted`; `since`: those
    fits, when read already), or built again if the ledger replanned since (or it is old); None
    when the plan is too short to be worth it."""
    if snapshot is None or not fresh(snapshot, now, cache, generation, inserted):
        return build(session, now, settings, cache, generation, inserted)
    if snapshot.inserted < inserted:
        rows = since if since is not None else session.execute(
            FITTED_SINCE, {"after": snapshot.inserted, "upto": inserted})
        for r in rows:
            if r.status == S.QUEUED.value:
                snapshot.book.add(planned(r))
            else:   # cancelled since, numbered as a fit is (engine/plan_remove.py): its place stays here
                snapshot.book.taken_out(r.gpu_model)
        snapshot.inserted = inserted
    return snapshot if len(snapshot.book) >= cache.min_waiting else None


# the leases fitted in, or taken out by a cancel (no longer queued), since a number
FITTED_SINCE = (select(*COLUMNS, L.status).where(L.plan_seq > bindparam("after"), L.plan_seq <= bindparam("upto"))
                .order_by(L.plan_seq))
# the GPU models whose plan is no longer plan()'s since the last replan (which clears plan_seq): a
# lease was taken out by a cancel (no longer queued), or placed where its reasons call provisional
# (a fit out of order, a new duration: engine/plan_change.py; PlanBook.add cannot tell the last
# when it lands last in the order)
INEXACT = (select(L.gpu_model).where(L.plan_seq <= bindparam("upto"), or_(
    L.status != S.QUEUED.value, cast(L.queue_reasons, String).contains('"provisional"'))).distinct())


def build(session: Session, now: int, settings: PlannerSettings, cache: InsertCache, generation: int,
          inserted: int) -> Snapshot | None:
    """The ledger's plan as of `generation` and the first `inserted` fits, from the rows; None
    when it is too short to be worth it, or not all written yet (rows planned before their
    hosts were kept). Read with or without the lock: fits committed after `inserted` was read
    are left out (catch_up adds them), and a replan meanwhile shows in the generation."""
    rows = list(session.execute(select(*COLUMNS).where(
        L.status == S.QUEUED.value, L.queue_position.is_not(None),
        L.plan_seq.is_(None) | (L.plan_seq <= inserted))))
    if len(rows) < cache.min_waiting or any(r.start_at is not None and r.planned_hosts is None for r in rows):
        return None
    inputs = ledger.load_inputs(session, now, settings, queued=[])
    # the last replan's leases (a replan clears plan_seq), then those fitted in since, in their
    # order: PlanBook.add tells whether each went last, so whether the plan is still plan()'s
    known, cache.known = cache.known, {}

    def of(r: Any) -> Planned:
        key = tuple(r)
        p = cache.known[key] = known.get(key) or planned(r)
        return p
    book = PlanBook(now, inputs.hosts, inputs.holds, inputs.quotas,
                    [of(r) for r in rows if r.plan_seq is None], inputs.usage,
                    ledger.settings_for(inputs, settings))
    for r in sorted((r for r in rows if r.plan_seq is not None), key=lambda r: r.plan_seq):
        book.add(of(r))
    for model in session.scalars(INEXACT, {"upto": inserted}):   # not in the rows: the plan is not plan()'s
        book.taken_out(model)
    return Snapshot(generation, inserted, now, inputs.allowance, book)


def planned(r: Any) -> Planned:
    """A row of COLUMNS as a lease of the plan."""
    request = LeaseRequest(
        lease_id=r.id, project_id=r.project_id, gpu_model=r.gpu_model, gpus_per_vm=r.gpus_per_vm,
        instances=r.instances, duration=r.duration, earliest_start=r.earliest_start,
        latest_start=r.latest_start, created_at=r.created_at,
        priority=r.priority, name=r.name, preemptible=r.preemptible, arrival=r.arrival or 0)
    place = None
    hosts = json.loads(r.planned_hosts) if r.planned_hosts else None
    if r.start_at is not None and hosts:
        place = Placement(r.start_at, r.end_at, tuple(hosts))
    return Planned(request, place, bool(r.borrowing))

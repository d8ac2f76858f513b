"""Everyone's queue (Slurm's squeue): every waiting lease, in the planner's order per
GPU model, with what the last replan wrote on it (position, ETA, reasons), a page at a time."""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import DateTime, Integer, String, bindparam, case, func, select, tuple_
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeEngine

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import WAITING
from gpu_tenancy.errors import BadRequest

L = m.Lease
# what the queue shows of a lease
COLUMNS = (L.id, L.name, L.project_id, L.status, L.shape, L.gpu_model, L.gpus_per_vm, L.instances,
           L.earliest_start, L.created_at, L.queue_position, L.queue_eta, L.queue_reasons, L.priority,
           L.preemptible, L.start_by_ratio)
# the queue's order: by GPU model, the planned leases by position before those not planned yet
# (just asked for), then in the order asked (created_at has whole seconds: then arrival, the
# lease's first event's id, and the id). Said without NULLs, so that a page's start is one
# row-value comparison (NULLs sort first on SQLite and last on PostgreSQL, and compare to nothing)
UNPLANNED = case((L.queue_position.is_(None), 1), else_=0)
KEY = (L.gpu_model, UNPLANNED, func.coalesce(L.queue_position, 0), L.created_at)
ORDER = (*KEY, func.coalesce(L.arrival, 0), L.id)
# a marker's values bound as KEY's types (SQLite keeps times as text)
KEY_TYPES: tuple[TypeEngine[Any], ...] = (String(), Integer(), Integer(), DateTime())
EPOCH = datetime(1970, 1, 1)
MICROSECOND = timedelta(microseconds=1)
# A marker: the KEY of the previous page's last entry, as model~unplanned~position~created, and
# how many entries of that key (ties: one position, asked in one second) the pages so far listed.
# Not the lease's id (another project's entry shows none) nor its arrival (a sequence of the
# whole cloud's events: two markers would tell how busy other projects were); and a key, unlike
# an id, still says where the next page starts once that lease has started or gone
MARKER = re.compile(r"([A-Za-z0-9._-]{1,64})~([01])~([0-9]{1,9})~([0-9]{1,18})~([0-9]{1,9})")


class Marker(NamedTuple):
    key: tuple   # the values of KEY
    seen: int    # the entries of that key listed already


def key_of(row: Row) -> tuple:
    return row.gpu_model, int(row.queue_position is None), row.queue_position or 0, row.created_at


def marker_of(rows: list[Row], previous: Marker | None) -> str:
    """The marker of the page of `rows` (of COLUMNS, in order; not empty), asked after `previous`."""
    key = key_of(rows[-1])
    seen = sum(1 for r in rows if key_of(r) == key) + (previous.seen if previous and previous.key == key else 0)
    model, unplanned, position, created = key
    return f"{model}~{unplanned}~{position}~{(created - EPOCH) // MICROSECOND}~{seen}"


def parse_marker(marker: str) -> Marker:
    """A marker as its key and count; a 400 for anything else."""
    found = MARKER.fullmatch(marker)
    if found is None:
        raise BadRequest(f"marker {marker[:64]} is not a queue marker (take it from the queue's next link)",
                         codes.INVALID_MARKER)
    model, unplanned, position, created, seen = found.groups()
    return Marker((model, int(unplanned), int(position), EPOCH + int(created) * MICROSECOND), int(seen))


def waiting(session: Session, gpu_model: str | None = None, marker: Marker | None = None,
            limit: int | None = None) -> tuple[list[Row], bool]:
    """The waiting leases (requested, queued) in the queue's order after `marker` (parse_marker),
    the first `limit` of them (None: every one); and whether more follow."""
    q = select(*COLUMNS).where(L.status.in_([s.value for s in WAITING]))
    if gpu_model is not None:
        q = q.where(L.gpu_model == gpu_model)
    q = q.order_by(*ORDER)
    rows: list[Row] = []
    if marker is not None:
        mark = tuple_(*(bindparam(f"mark_{i}", value, type_=kind) for i, (kind, value)
                        in enumerate(zip(KEY_TYPES, marker.key))))
        # first those of the marker's key not listed yet (an OFFSET among them alone: over the
        # whole rest, once the marker's own lease had started or gone, it skipped the lease after
        # it; and a count given large made the rest be read whole), then those after that key
        same = q.where(tuple_(*KEY) == mark).offset(marker.seen)
        rows = list(session.execute(same if limit is None else same.limit(limit + 1)))
        q = q.where(tuple_(*KEY) > mark)
    if limit is None:
        return rows + list(session.execute(q)), False
    if len(rows) <= limit:
        rows += session.execute(q.limit(limit + 1 - len(rows)))
    return rows[:limit], len(rows) > limit

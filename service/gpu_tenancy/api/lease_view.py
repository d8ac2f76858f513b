"""What the API shows of a lease: render() for one lease (an ORM row with its
relationships), and page() for a listing, which reads only the columns the
answer shows, as plain rows (no ORM objects: a page is read-only), in four
statements whatever its size: the page, then its allocations, servers and
failures."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from sqlalchemy.sql.elements import BindParameter, ColumnElement

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from flask import url_for
from sqlalchemy import Row, bindparam, select, tuple_
from sqlalchemy.orm import Session

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.start_by import MarginBasis, basis_words, held_range, start_by, waits_from
from gpu_tenancy.domain.failures import FailureClass, rule
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import networking, readiness
from gpu_tenancy.errors import BadRequest
from gpu_tenancy.timeutil import rfc3339_stored as stamp

WAITING = (LeaseState.REQUESTED.value, LeaseState.QUEUED.value)
# final states reached only from waiting or scheduled (domain/states.py)
NEVER_RAN = (LeaseState.CANCELLED.value, LeaseState.EXPIRED.value)
# what render_view() reads of a lease row
SHOWN = ("id", "name", "project_id", "user_id", "status", "shape", "gpu_model", "gpus_per_vm", "instances",
         "earliest_start", "latest_start", "duration", "start_at", "end_at", "priority", "priority_class",
         "preemptible", "borrowing", "early_end_kind", "early_end_at", "early_end_for", "early_end_for_project",
         "early_end_reason",
         "image", "volume_id", "volume_size_gb", "key_name", "queue_position", "queue_eta", "queue_reasons",
         "start_by_ratio", "start_by_basis", "readiness_probe", "failure_class", "failure_message", "boot", "flavor_id", "flavor_name",
         "created_at", "updated_at", "network_via", "network_id", "network_name", "floating_ip", "ssh_user",
         "parked_at", "resume_by", "remaining")
# the keys render_view() answers, in order: the Lease schema of /v1/openapi.json is built
# from this list (api/response_schemas.py), so the two cannot drift apart unnoticed
FIELDS = ("id", "name", "project_id", "user_id", "status", "shape", "gpu_model", "gpus_per_instance", "instances",
          "requested_start", "latest_start", "duration", "start", "end", "cancelled_at", "priority",
          "priority_class", "preemptible", "borrowing", "early_end", "park", "boot", "flavor", "vms_free", "image", "volume", "key_name",
          "queue", "allocations", "servers", "ready", "readiness", "failure", "failures", "created_at", "updated_at",
          "links", "network", "floating_ip")


def render(row: m.Lease) -> dict:
    return render_view(row, row.allocations, row.servers, row.failures, lease_href(row.id), rt.is_admin(), rt.now())


# The cloud's own words, which the engine keeps after its message (read with the service's
# admin rights, they can tell of other projects and of the cloud's insides), and the text
# of an internal error (ours, for the log): operators see them, tenants the rest.
CLOUD_SAID = re.compile(r" \(cloud said: .*\)(?=; |$)", re.DOTALL)
INTERNAL_TEXT = re.compile(r"internal error: .*?(?=; |$)", re.DOTALL)


def for_tenant(message: str | None) -> str | None:
    """A failure's text as a tenant sees it: its class and our message, without the above."""
    if not message:
        return message
    return INTERNAL_TEXT.sub("internal error", CLOUD_SAID.sub("", message))


def lease_href(lease_id: str) -> str:
    return url_for("leases.show", lease_id=lease_id, _external=True)


def render_view(row: Any, allocations: Sequence[Any], servers: Sequence[Any], failures: Sequence[Any], href: str,
                operator: bool, now: int) -> dict:
    """`row`: a lease, or a row of its SHOWN columns; the others: its allocations,
    servers and failures, each in their order (VM index; VM index; id). `operator`:
    failures with the cloud's text (else as for_tenant shows them); `now`: what its start-by is told from."""
    text = (lambda message: message) if operator else for_tenant
    never_ran = row.status in NEVER_RAN
    by = start_by_now(row, now) if row.status in WAITING else None
    return {
        "id": row.id,
        "name": row.name,
        "project_id": row.project_id,
        "user_id": row.user_id,
        "status": row.status,
        "shape": row.shape,
        "gpu_model": row.gpu_model,
        "gpus_per_instance": row.gpus_per_vm,
        "instances": row.instances,
        "requested_start": stamp(row.earliest_start),
        "latest_start": stamp(row.latest_start),
        "duration": row.duration,
        # a cancelled or expired lease ended while it waited: the start and end it was planned for never came
        "start": None if never_ran else stamp(row.start_at),
        "end": None if never_ran else stamp(row.end_at),
        "cancelled_at": stamp(row.updated_at) if row.status == LeaseState.CANCELLED.value else None,
        "priority": row.priority,
        "priority_class": row.priority_class,
        "preemptible": row.preemptible,
        "borrowing": row.borrowing,
        "early_end": ({"kind": row.early_end_kind, "at": stamp(row.early_end_at),
                       # another project's lease is not named to this one's members (it is a 404 to them)
                       "for_lease": row.early_end_for if operator or row.early_end_for_project == row.project_id
                       else None, "reason": row.early_end_reason}
                      if row.early_end_kind else None),
        "park": ({"parked_at": stamp(row.parked_at), "resume_by": stamp(row.resume_by),
                  "remaining": row.remaining} if row.parked_at else None),
        "boot": row.boot,
        "flavor": {"id": row.flavor_id, "name": row.flavor_name} if row.flavor_id else None,
        "vms_free": vms_free(row, servers),
        "image": row.image,
        "volume": ({"id": row.volume_id, "size_gb": row.volume_size_gb}
                   if row.volume_id or row.volume_size_gb else None),
        "key_name": row.key_name,
        "queue": ({"position": row.queue_position, "eta": stamp(row.queue_eta), "start_by": by,
                   "start_by_basis": render_basis(row.start_by_ratio, row.start_by_basis) if by else None,
                   "reasons": row.queue_reasons or []}
                  if row.status in WAITING else None),
        "allocations": [{"instance": a.vm_index, "host": a.host, "gpus": a.gpus,
                         "start": stamp(a.start_at), "end": stamp(a.end_at)} for a in allocations],
        "servers": [{"instance": s.vm_index, "id": s.cloud_id, "host": s.host, "status": s.status,
                     "addresses": s.addresses or [], "ssh": networking.ssh_line(row.ssh_user, s.addresses)}
                    for s in servers],
        "ready": readiness.is_ready(row, servers),
        "readiness": readiness.summary(row, servers),
        "failure": ({"class": row.failure_class, "message": text(row.failure_message)}
                    if row.failure_class else None),
        "failures": [render_failure(f, text) for f in failures],
        "created_at": stamp(row.created_at),
        "updated_at": stamp(row.updated_at),
        "links": [{"rel": "self", "href": href}],
        "network": networking.render_network(row),
        "floating_ip": row.floating_ip,
    }


# while the lease's flavor can boot: its servers take its VMs one each, until deleted
# (one the cloud refused, in ERROR, holds none)
BOOTABLE = (LeaseState.PROVISIONING.value, LeaseState.ACTIVE.value)


def start_by_now(row: Any, now: int) -> str | None:
    """A waiting lease's start-by now: its ETA plus its project's margin (domain/start_by.py) for
    the wait left; none without an ETA, or before its queue place was written with a margin."""
    if row.queue_eta is None or row.start_by_ratio is None:
        return None
    return stamp(utcnow_naive(start_by(waits_from(now, to_epoch(row.earliest_start)), to_epoch(row.queue_eta),
                                       row.start_by_ratio)))


def render_basis(ratio: float | None, basis: dict | None) -> dict | None:
    """Why the start-by is as far past the ETA as it is: what the margin `ratio` the lease was
    last told was learnt from (domain/start_by.py: MarginBasis; None: told before it was kept)."""
    if ratio is None or not basis:
        return None
    b = MarginBasis(ratio, basis["source"], basis["samples"], basis.get("load_class"))
    held = None
    if b.load_class is not None:
        low, high = held_range(b.load_class)
        held = {"from": low, "below": high}
    return {"source": b.source, "quantile": b.quantile, "samples": b.samples, "ratio": round(b.ratio, 3),
            "load_class": b.load_class, "held_over_fair_share": held, "message": basis_words(b)}


def vms_free(row: Any, servers: Sequence[Any]) -> int | None:
    """How many more servers the lease's flavor can boot (None unless it can boot now)."""
    if row.status not in BOOTABLE:
        return None
    return max(row.instances - sum(1 for s in servers if s.status not in ("DELETED", "ERROR")), 0)


def render_failure(entry: Any, text: Callable[[Any], Any] = lambda message: message) -> dict:
    failure_rule = rule(FailureClass(entry.failure_class))
    return {"at": stamp(entry.at), "attempt": entry.attempt, "class": entry.failure_class,
            "message": text(entry.message), "user_message": failure_rule.user_message,
            "operator_hint": failure_rule.operator_hint, "retry": failure_rule.retry.value,
            "hosts": entry.hosts or [], "action": entry.action, "retry_at": stamp(entry.retry_at)}


LEASES, ALLOCATIONS, SERVERS, FAILURES = (t.__table__.c for t in (m.Lease, m.Allocation, m.Server, m.LeaseFailure))


def param(name: str, column: ColumnElement[Any], **kw: Any) -> BindParameter[Any]:
    return bindparam(name, type_=column.type, **kw)   # typed as the column (SQLite keeps times as text)


# Core statements on the tables (no ORM entities, so no ORM result processing), built
# once: the page, and its leases for the queries of their children, by bounds that
# never change (see page_leases) or by ids.
PAGE = select(*(LEASES[c] for c in SHOWN)).order_by(LEASES.created_at, LEASES.id)
NEWEST_FIRST = select(*(LEASES[c] for c in SHOWN)).order_by(LEASES.created_at.desc(), LEASES.id.desc())
KEY = tuple_(LEASES.created_at, LEASES.id)
BETWEEN = (KEY >= tuple_(param("first_at", LEASES.created_at), param("first_id", LEASES.id)),
           KEY <= tuple_(param("last_at", LEASES.created_at), param("last_id", LEASES.id)))
IN_PROJECT = select(LEASES.id).where(LEASES.project_id == param("project", LEASES.project_id), *BETWEEN)
IN_ANY_PROJECT = select(LEASES.id).where(*BETWEEN)
IDS = param("ids", LEASES.id, expanding=True)


def children(among: Any) -> tuple:
    """The queries of a page's allocations, servers and failures, each in its order."""
    a, s, f = ALLOCATIONS, SERVERS, FAILURES
    return (select(a.lease_id, a.vm_index, a.host, a.gpus, a.start_at, a.end_at)
            .where(a.lease_id.in_(among)).order_by(a.lease_id, a.vm_index),
            select(s.lease_id, s.vm_index, s.cloud_id, s.host, s.status, s.readiness, s.readiness_detail,
                   s.readiness_at, s.addresses).where(s.lease_id.in_(among)).order_by(s.lease_id, s.vm_index),
            select(f.lease_id, f.at, f.attempt, f.failure_class, f.message, f.hosts, f.action, f.retry_at)
            .where(f.lease_id.in_(among)).order_by(f.lease_id, f.id))


CHILDREN = {"project": children(IN_PROJECT), "any project": children(IN_ANY_PROJECT), "ids": children(IDS)}


def page(session: Session, project: str | None, statuses: list[str], marker: str | None,
         limit: int, newest_first: bool = False) -> tuple[list[dict], bool]:
    """The first `limit` leases of `project` (None: every project) in `statuses` (empty:
    any) after the lease `marker`, oldest first (or newest first), rendered; and whether more follow."""
    conditions = []
    if project:
        conditions.append(LEASES.project_id == project)
    if statuses:
        conditions.append(LEASES.status.in_(statuses))
    if marker:
        mark = session.execute(select(LEASES.project_id, LEASES.created_at, LEASES.id)
                               .where(LEASES.id == marker)).first()
        if mark is None or (project and mark.project_id != project):
            raise BadRequest(f"marker {marker[:64]} is not a lease of this listing", "gpu_tenancy.invalid_marker")
        conditions.append(after(mark.created_at, mark.id, newest_first))
    rows = session.execute((NEWEST_FIRST if newest_first else PAGE).where(*conditions).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    if not rows:
        return [], more
    queries, params = page_leases(project, statuses, rows[::-1] if newest_first else rows)   # its bounds: oldest first
    allocations, servers, failures = (by_lease(session.execute(q, params)) for q in queries)
    # the links differ only by the id: url_for once, not once per lease
    base = url_for("leases.index", _external=True)
    none, operator, now = (), rt.is_admin(), rt.now()
    return [render_view(r, allocations.get(r.id, none), servers.get(r.id, none), failures.get(r.id, none),
                        f"{base}/{quote(r.id, safe='')}", operator, now) for r in rows], more


def after(created_at: Any, lease_id: str, newest_first: bool = False) -> ColumnElement[bool]:
    """The leases after the marker (created_at, id) in the listing's order, as one row-value
    comparison: a range of ix_leases_created or ix_leases_project_created_id (0032), where a page
    starts at the marker. Said as `created_at > ? OR (created_at = ? AND id > ?)`, no index
    bounded it: a page read a project's listing up to the marker (PostgreSQL: deep pages grew
    slower) or all of it after the marker, sorted (SQLite: early pages did)."""
    mark = tuple_(param("marker_at", LEASES.created_at, value=created_at), param("marker_id", LEASES.id,
                                                                                 value=lease_id))
    return KEY < mark if newest_first else KEY > mark


def page_leases(project: str | None, statuses: list[str], rows: Sequence[Row[Any]]) -> tuple[tuple, dict]:
    """The queries of the page's children, and their parameters. Unfiltered by status,
    the page is every lease of the listing from its first to its last: bounds that
    never change, in statements whose text is the same for every page (not rendered
    with fifty parameters each time). Filtered by status (which can change between
    two statements), the leases' ids."""
    if statuses:
        return CHILDREN["ids"], {"ids": [r.id for r in rows]}
    first, last = rows[0], rows[-1]
    bounds = {"first_at": first.created_at, "first_id": first.id, "last_at": last.created_at, "last_id": last.id}
    if project:
        return CHILDREN["project"], {**bounds, "project": project}
    return CHILDREN["any project"], bounds


def by_lease(rows: Iterable[Any]) -> dict[str, list]:
    grouped: dict[str, list] = defaultdict(list)
    for r in rows:
        grouped[r.lease_id].append(r)
    return grouped

"""The offer admins curate: shapes and standard images. Retiring an entry only
stops new leases from choosing it; leases that already use it keep it until
they end (the engine still finds a retired entry by name)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive
from gpu_tenancy.domain.states import FINAL
from gpu_tenancy.errors import Conflict, NotFound

Entry = type[m.Shape] | type[m.Image]

# what each catalog is called, and the lease column that refers to its entries
KINDS = {m.Shape: ("shape", m.Lease.shape), m.Image: ("image", m.Lease.image)}


def entries(session: Session, model: Entry, include_retired: bool = False) -> list:
    q = select(model).order_by(model.name)
    if not include_retired:
        q = q.where(model.retired_at.is_(None))
    return list(session.scalars(q))


@dataclass(frozen=True)
class Offered:
    """What a new lease and its offers read of a shape."""
    name: str
    gpu_model: str
    gpus: int


def offered_shapes(session: Session) -> list[Offered]:
    """The shapes not retired, by name: read once per session (one transaction here; a create
    looks its shape up in them, and its offers try the others), then kept in `session.info`
    (a create reads them with its other facts: keep_offered)."""
    shapes = session.info.get("offered_shapes")
    if shapes is None:
        shapes = keep_offered(session, [Offered(s.name, s.gpu_model, s.gpus) for s in entries(session, m.Shape)])
    return shapes


def keep_offered(session: Session, shapes: list[Offered]) -> list[Offered]:
    """`shapes`, as this session's offered_shapes."""
    session.info["offered_shapes"] = shapes
    return shapes


def default_image(session: Session) -> str | None:
    """The image a lease boots when it names none: the oldest image still offered (the demo
    seeds the cloud's images in its order, so its first). The API marks it in GET /v1/images,
    and the dashboard's form preselects it from there: one default for both."""
    return session.scalar(DEFAULT_IMAGE)


DEFAULT_IMAGE = select(m.Image.name).where(m.Image.retired_at.is_(None)).order_by(m.Image.created_at,
                                                                                  m.Image.name).limit(1)


def get(session: Session, model: Entry, name: str):
    row = session.get(model, name)
    if row is None:
        kind = KINDS[model][0]
        shown = name if len(name) <= 64 else name[:64] + "…"  # names are at most 64 characters
        raise NotFound(f"{kind} '{shown}' not found; GET /v1/{kind}s lists them",
                       f"gpu_tenancy.{kind}_not_found")
    return row


def add(session: Session, model: Entry, now: int, fields: dict):
    kind = KINDS[model][0]
    existing = cast("m.Shape | m.Image | None", session.get(model, fields["name"]))
    if existing is not None:
        state = "a retired" if existing.retired_at is not None else "an"
        raise Conflict(f"there is already {state} {kind} named '{fields['name']}'; names are never reused, "
                       "choose another", f"gpu_tenancy.{kind}_exists")
    row = model(**fields, created_at=utcnow_naive(now))
    session.add(row)
    session.flush()
    return row


def retire(session: Session, model: Entry, name: str, now: int) -> tuple[object, int]:
    """Retire an entry; returns it and how many unfinished leases still use it."""
    kind, lease_column = KINDS[model]
    row = get(session, model, name)
    if row.retired_at is not None:
        raise Conflict(f"{kind} '{name}' is already retired", f"gpu_tenancy.{kind}_retired")
    row.retired_at = utcnow_naive(now)
    in_use = session.scalars(select(func.count()).select_from(m.Lease).where(
        lease_column == name, m.Lease.status.not_in([s.value for s in FINAL]))).one()
    return row, in_use

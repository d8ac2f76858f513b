"""What a new lease's checks read of the database, in one statement: the shapes offered, the
default image, how many leases the project and the user have waiting, the project's quota of
the asked shape's GPU model, whether it has a budget of it, an unfinished lease of the project
with the name asked, the hosts' GPU counts of that model, the ledger's counts (the fit's,
engine/plan_insert.py) and the project's start-by margin (engine/start_by_margins.py).
Each was a statement of its own, a round trip and about a millisecond of SQLAlchemy and
psycopg in every create (bench/api_load.py --waiting); engine/leases.py
checks them in the order it always did. Read afresh by every create: nothing is kept between
requests, so an operator's change of the catalog, a quota or the hosts is seen by the next."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnClause, Integer, Select, String, bindparam, cast, func, literal_column, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.domain.start_by import MarginBasis
from gpu_tenancy.domain.states import FINAL, WAITING, LeaseState
from gpu_tenancy.engine import catalog, start_by_margins

L = m.Lease
# what counts against the waiting limits (engine/limits.py: Limits.check_waiting says why)
WAITING_STATES = [s.value for s in (*WAITING, LeaseState.SCHEDULED)]


@dataclass(frozen=True)
class QuotaLimits:
    """A quota row's limits (the columns engine/leases.py: check_quota reads)."""
    gpus: int
    borrow_gpus: int
    max_duration: int | None


@dataclass(frozen=True)
class AskFacts:
    shapes: list[catalog.Offered]   # not retired, by name
    default_image: str | None
    waiting_project: int   # up to one past the limit asked (read's most_project)
    waiting_user: int
    quota: QuotaLimits | None
    has_budget: bool
    name_taken: tuple[str, str] | None   # (id, status) of an unfinished lease with the name
    host_gpus: list[int]   # each host's GPUs, of the asked shape's model (none if it is unknown)
    ledger: tuple[int, int]   # the ledger's generation and count of fits
    # the project's start-by margin, else everyone's (none kept yet: NONE_YET)
    start_by_margin: MarginBasis = start_by_margins.NONE_YET


# Separators of the rows and fields aggregated into one text (catalog names and GPU models
# are [A-Za-z0-9._-]: api/catalog.py)
ROW, FIELD = "\x1e", "\x1f"


def _statement() -> Select:
    """The one SELECT, built once (building it took half its time): parameters project_id,
    user_id, shape, name, most_project and most_user."""
    project_id, user_id, shape, name = (bindparam(k, type_=String) for k in
                                        ("project_id", "user_id", "shape", "name"))
    offered = m.Shape.retired_at.is_(None)
    gpu_model = select(m.Shape.gpu_model).where(m.Shape.name == shape, offered).scalar_subquery()
    lock = m.Lock.name == "ledger"
    # counted only up to one past the limit (parameters most_project, most_user): all the check
    # needs, and a project's count no longer grows with its queue; of the index's own columns
    # (project, status, user: migration 0022), so that the index alone answers, as for count(*)
    waiting = select(L.status).where(L.project_id == project_id, L.status.in_(constants(WAITING_STATES)))

    def counted(rows: Select, most: str) -> Select:
        return select(func.count()).select_from(rows.limit(bindparam(most, type_=Integer)).subquery())
    quota = m.Quota
    margin = m.StartByMargin
    # what the ratio was learnt from, one text (never NULL in a row, so that the ratio and it are of one row;
    # the ratio read apart: its text could round it)
    margin_basis = (func.coalesce(margin.source, "") + FIELD + cast(margin.samples, String) + FIELD
                    + func.coalesce(cast(margin.load_class, String), ""))
    of_quota = (quota.project_id == project_id, quota.gpu_model == gpu_model)
    clash = select(L.id + FIELD + L.status).where(   # its id and status, in one scan
        L.project_id == project_id, L.name == name, L.status.not_in(constants(s.value for s in FINAL))).limit(1)
    return select(
        select(func.aggregate_strings(m.Shape.name + FIELD + m.Shape.gpu_model + FIELD + cast(m.Shape.gpus, String),
                                      ROW)).where(offered).scalar_subquery(),
        catalog.DEFAULT_IMAGE.scalar_subquery(),
        counted(waiting, "most_project").scalar_subquery(),
        counted(waiting.where(L.user_id == user_id), "most_user").scalar_subquery(),
        select(quota.gpus).where(*of_quota).scalar_subquery(),
        select(quota.borrow_gpus).where(*of_quota).scalar_subquery(),
        select(quota.max_duration).where(*of_quota).scalar_subquery(),
        select(m.Budget.id).where(m.Budget.project_id == project_id, m.Budget.gpu_model == gpu_model)
        .limit(1).scalar_subquery(),
        clash.scalar_subquery(),
        select(func.aggregate_strings(cast(m.Host.gpus, String), ",")).where(m.Host.gpu_model == gpu_model)
        .scalar_subquery(),
        select(m.Lock.generation).where(lock).scalar_subquery(),
        select(m.Lock.inserted).where(lock).scalar_subquery(),
        *(func.coalesce(*(select(column).where(margin.project_id == project).scalar_subquery()
                          for project in (project_id, start_by_margins.EVERYONE)))
          for column in (margin.ratio, margin_basis)))


def constants(states: Iterable[str]) -> list[ColumnClause]:
    """Lease states written into the statement: a list of values given as parameters would be
    expanded into the SQL again on every execution (SQLAlchemy's "expanding" IN)."""
    listed = sorted(states)   # the same text in every process (FINAL is a set)
    assert all(s.isidentifier() for s in listed)   # nothing to quote
    return [literal_column(f"'{s}'") for s in listed]


STATEMENT = _statement()


def read(session: Session, project_id: str, user_id: str, shape: str, name: str, most_project: int,
         most_user: int) -> AskFacts:
    """The facts for an ask of `shape` (quota, budget and hosts of its GPU model); the project's
    and the user's waiting leases counted up to one more than `most_project` and `most_user`."""
    (shapes, image, project, user, gpus, borrow, longest, budget, other, hosts, generation,
     inserted, ratio, basis) = session.connection().execute(   # not the session's: no ORM rows to make
        STATEMENT, {"project_id": project_id, "user_id": user_id, "shape": shape, "name": name,
                    "most_project": most_project + 1, "most_user": most_user + 1}).one()
    return AskFacts(offered_shapes(shapes), image, project, user,
                    None if gpus is None else QuotaLimits(gpus, borrow, longest),
                    budget is not None, None if other is None else pair(other),
                    [int(g) for g in hosts.split(",")] if hosts else [], (generation or 0, inserted or 0),
                    start_by_margins.NONE_YET if ratio is None else margin_of(ratio, basis))


def margin_of(ratio: float, basis: str) -> MarginBasis:
    source, samples, load = basis.split(FIELD)
    return MarginBasis(ratio, source, int(samples), int(load) if load else None)


def pair(text: str) -> tuple[str, str]:
    """The clashing lease's id and status."""
    lease_id, status = text.split(FIELD, 1)
    return lease_id, status


def offered_shapes(text: str | None) -> list[catalog.Offered]:
    """The shapes' aggregated text, by name."""
    fields = (row.split(FIELD) for row in text.split(ROW)) if text else ()
    return sorted((catalog.Offered(name, gpu_model, int(gpus)) for name, gpu_model, gpus in fields),
                  key=lambda s: s.name)

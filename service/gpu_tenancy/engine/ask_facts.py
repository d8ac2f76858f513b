"""What a new lease's checks read of the database besides the catalog's shapes and the
hosts, read in one statement: the default image, how many leases the project and the user
have waiting, the project's quota of the GPU model, whether it has a budget of it, and an
unfinished lease of the project with the name asked. Each was a statement of its own, a
round trip and about a millisecond of SQLAlchemy and psycopg in every create
(bench/api_load.py --waiting); engine/leases.py checks them in the order it always did."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Select, String, bindparam, func, select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import FINAL, WAITING, LeaseState
from gpu_tenancy.engine import catalog

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
    default_image: str | None
    waiting_project: int
    waiting_user: int
    quota: QuotaLimits | None
    has_budget: bool
    name_taken: tuple[str, str] | None   # (id, status) of an unfinished lease with the name


def _statement() -> Select:
    """The one SELECT, built once (building it took half its time): parameters project_id,
    user_id, gpu_model and name."""
    project_id, user_id, gpu_model, name = (bindparam(k, type_=String) for k in
                                            ("project_id", "user_id", "gpu_model", "name"))
    waiting = select(func.count()).where(L.project_id == project_id, L.status.in_(WAITING_STATES))
    quota = m.Quota
    of_quota = (quota.project_id == project_id, quota.gpu_model == gpu_model)
    clash = select(L.id).where(L.project_id == project_id, L.name == name,
                               L.status.not_in([s.value for s in FINAL])).limit(1).scalar_subquery()
    return select(
        catalog.DEFAULT_IMAGE.scalar_subquery(),
        waiting.scalar_subquery(),
        waiting.where(L.user_id == user_id).scalar_subquery(),
        select(quota.gpus).where(*of_quota).scalar_subquery(),
        select(quota.borrow_gpus).where(*of_quota).scalar_subquery(),
        select(quota.max_duration).where(*of_quota).scalar_subquery(),
        select(m.Budget.id).where(m.Budget.project_id == project_id, m.Budget.gpu_model == gpu_model)
        .limit(1).scalar_subquery(),
        clash,
        select(L.status).where(L.id == clash).scalar_subquery())   # that lease's


STATEMENT = _statement()


def read(session: Session, project_id: str, user_id: str, gpu_model: str, name: str) -> AskFacts:
    image, project, user, gpus, borrow, longest, budget, other_id, other_status = session.execute(
        STATEMENT, {"project_id": project_id, "user_id": user_id, "gpu_model": gpu_model, "name": name}).one()
    return AskFacts(image, project, user, None if gpus is None else QuotaLimits(gpus, borrow, longest),
                    budget is not None, None if other_id is None else (other_id, other_status))

"""The audit record: every change someone asks for through the API. record()
adds to the caller's session, so a change and its record commit or roll back
together; a refused request changes nothing and is never recorded."""
from __future__ import annotations

from dataclasses import dataclass

from typing import cast

from sqlalchemy import String, select, update
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive

ACTIONS = ("quota.update", "shape.create", "shape.retire", "image.create", "image.retire",
           "lease.create", "lease.update", "lease.delete", "lease.resume", "lease.done", "priority_class.update",
           "priority_class.delete",
           "budget.create", "budget.delete", "webhook.update", "webhook.delete", "host.update")
SUCCESS = "success"


@dataclass(frozen=True)
class Who:
    """Who asked, and from where (as the request told it)."""
    user_id: str | None
    project_id: str | None
    request_id: str | None
    remote_address: str | None


def record(session: Session, now: int, who: Who, action: str, target_id: str, target_project_id: str | None,
           before: dict | None, after: dict | None, outcome: str = SUCCESS) -> m.AuditRecord:
    """`action` is "<target type>.<verb>"; before and after are the resource as the API shows it."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    row = m.AuditRecord(
        at=utcnow_naive(now), action=action, target_type=action.split(".")[0], before=before, after=after,
        outcome=outcome, **{name: fit(name, value) for name, value in (
            ("user_id", who.user_id), ("user_project_id", who.project_id), ("request_id", who.request_id),
            ("remote_address", who.remote_address), ("target_id", target_id),
            ("target_project_id", target_project_id))})
    session.add(row)
    return row


def amend_after(session: Session, record_id: int, after: dict) -> None:
    """Bring a record's `after` up to date with what a change became in a second
    transaction (a new lease, once planned)."""
    session.execute(update(m.AuditRecord).where(m.AuditRecord.id == record_id).values(after=after))


def fit(column: str, value: str | None) -> str | None:
    """Identity headers are the caller's to write: keep them printable and within
    the column, so that an odd header can never fail (and so undo) the change."""
    if value is None:
        return None
    if not value.isprintable():   # the usual header is: not read character by character
        value = "".join(c for c in value if c.isprintable())
    return value[:cast(String, m.AuditRecord.__table__.c[column].type).length]


def query(action: list[str] | None = None, user_id: str | None = None, project_id: str | None = None,
          target_id: str | None = None, since: int | None = None, until: int | None = None,
          after_id: int | None = None):
    """Records oldest first; project_id is the target's project; since inclusive, until exclusive."""
    q = select(m.AuditRecord)
    if action:
        q = q.where(m.AuditRecord.action.in_(action))
    for column, value in ((m.AuditRecord.user_id, user_id), (m.AuditRecord.target_project_id, project_id),
                          (m.AuditRecord.target_id, target_id)):
        if value is not None:
            q = q.where(column == value)
    if since is not None:
        q = q.where(m.AuditRecord.at >= utcnow_naive(since))
    if until is not None:
        q = q.where(m.AuditRecord.at < utcnow_naive(until))
    if after_id is not None:
        q = q.where(m.AuditRecord.id > after_id)
    return q.order_by(m.AuditRecord.id)

"""One engine leads: a lease on the 'engine' lock row, renewed every tick.
A second engine sees it held and waits as standby until it expires."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db.models import Lock
from gpu_tenancy.db.session import utcnow_naive


def try_lead(session: Session, holder: str, now: int, lease_seconds: int) -> bool:
    """Take or renew the leadership; False while another live engine holds it."""
    row = session.scalars(select(Lock).where(Lock.name == "engine").with_for_update()).one()
    stamp = utcnow_naive(now)
    if row.holder not in (None, holder) and row.expires_at is not None and row.expires_at > stamp:
        return False
    row.holder, row.expires_at = holder, utcnow_naive(now + lease_seconds)
    return True


def step_down(session: Session, holder: str) -> None:
    row = session.scalars(select(Lock).where(Lock.name == "engine").with_for_update()).one()
    if row.holder == holder:
        row.holder, row.expires_at = None, None

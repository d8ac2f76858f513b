"""Dashboard logins kept server side. The browser's cookie holds a random id;
only its SHA-256 is stored, and the Keystone tokens are sealed with the
config's Fernet keys, so a copy of the table opens no session and holds no token."""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import delete
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session(session: Session, now: int, lifetime: int, **identity) -> tuple[str, m.DashboardSession]:
    """A new login; returns the id for the cookie and the row. `identity` holds
    the DashboardSession columns (user, project, roles, tokens, dev_mode)."""
    session.execute(delete(m.DashboardSession).where(m.DashboardSession.expires_at <= utcnow_naive(now)))
    session_id = secrets.token_urlsafe(32)
    expires = identity.pop("expires_at", None) or now + lifetime
    row = m.DashboardSession(id_hash=_hash(session_id), csrf_token=secrets.token_urlsafe(32), notices=[],
                             created_at=utcnow_naive(now), expires_at=utcnow_naive(min(expires, now + lifetime)),
                             **identity)
    session.add(row)
    return session_id, row


def find(session: Session, now: int, session_id: str | None) -> m.DashboardSession | None:
    """The live login the cookie names, or None."""
    if not session_id or len(session_id) > 128:
        return None
    row = session.get(m.DashboardSession, _hash(session_id))
    if row is None or row.expires_at <= utcnow_naive(now):
        return None
    return row


def close(session: Session, session_id: str) -> None:
    session.execute(delete(m.DashboardSession).where(m.DashboardSession.id_hash == _hash(session_id)))


# Notices wait for the next page; forms sent in a loop without reading one (a script) would
# otherwise grow the login's row, rewritten whole on each, without end. The newest are kept.
MAX_NOTICES = 10


def add_notice(session: Session, session_id: str, kind: str, message: str) -> None:
    """A message for the next page the user sees (after a redirect)."""
    row = session.get(m.DashboardSession, _hash(session_id))
    if row is not None:
        row.notices = [*row.notices, [kind, message]][-MAX_NOTICES:]


def take_notices(session: Session, session_id: str) -> list[list[str]]:
    row = session.get(m.DashboardSession, _hash(session_id))
    if row is None or not row.notices:
        return []
    notices, row.notices = row.notices, []
    return notices


class TokensUnreadable(Exception):
    """A stored token does not open with the keys: sealed with a key since dropped,
    or written before tokens were sealed. The login is over."""


@dataclass(frozen=True)
class Tokens:
    scoped: str | None      # project-scoped: the API calls
    unscoped: str | None    # to rescope on a project switch


class TokenSeal:
    """Fernet over a list of keys (MultiFernet): the first seals, any of them opens,
    so an operator rotates by putting a new key first and dropping the old one
    once the logins it sealed have expired."""

    def __init__(self, keys: list[str]):
        self._fernet = MultiFernet([Fernet(k) for k in keys]) if keys else None

    @property
    def ready(self) -> bool:
        return self._fernet is not None

    def seal(self, token: str | None) -> str | None:
        if token is None:
            return None
        if self._fernet is None:
            raise TokensUnreadable("no dashboard_token_keys: Keystone tokens cannot be kept")
        return self._fernet.encrypt(token.encode()).decode()

    def open(self, row: m.DashboardSession) -> Tokens:
        return Tokens(self._open(row.token), self._open(row.unscoped_token))

    def _open(self, sealed: str | None) -> str | None:
        if sealed is None:
            return None
        if self._fernet is None:
            raise TokensUnreadable("no dashboard_token_keys")
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            raise TokensUnreadable("a token does not open with dashboard_token_keys") from None

"""Secrets made once and kept in the database, so that every process of the service
(several gunicorn workers, the engine) holds the same one without the operator
configuring it: the offers' signing key when neither offer_secret nor
dashboard_token_keys is set (an offer made by one worker is taken by another)."""
from __future__ import annotations

import hashlib
import secrets

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope


def shared_secret(sessions: sessionmaker[Session], name: str, purpose: bytes) -> bytes:
    """The secret `name` (made now if no process made it yet), as a key for `purpose`."""
    stored = _read(sessions, name)
    if stored is None:
        try:
            with session_scope(sessions) as session:
                session.add(m.ServiceSecret(name=name, value=secrets.token_hex(32)))
        except IntegrityError:   # another process made it first: theirs is the one
            pass
        stored = _read(sessions, name)
        assert stored is not None
    return hashlib.sha256(purpose + b"\0" + bytes.fromhex(stored)).digest()


def _read(sessions: sessionmaker[Session], name: str) -> str | None:
    with session_scope(sessions) as session:
        row = session.get(m.ServiceSecret, name)
        return None if row is None else row.value

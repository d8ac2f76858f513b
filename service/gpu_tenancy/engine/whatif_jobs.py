"""What-if jobs: an admin's replay of the history, run in a thread of the process that was
asked (the API answers at once; GET shows the progress, then the figures). Bounded: one job at
a time per cloud (the unique `running` column), at most MAX_DAYS days and MAX_LEASES leases
(engine/whatif_history.py), at most MAX_SECONDS of replay. A job whose process died stops
counting as running once it has not reported for STALE seconds."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.reclaim import ReclaimSettings
from gpu_tenancy.engine import whatif_history
from gpu_tenancy.errors import BadRequest, Conflict, NotFound
from gpu_tenancy.whatif import changes as ch
from gpu_tenancy.whatif.compare import what_if
from gpu_tenancy.whatif.history import History

log = logging.getLogger(__name__)
RUNNING = "running"
STALE = 120          # seconds without a progress report: its process is gone
REPORT_EVERY = 1.0   # wall seconds between progress writes
MAX_SECONDS = 600    # a replay taking longer is stopped
KEPT = 20            # the listing shows this many, newest first


class TimeLimit(Exception):
    pass


def prepare(session: Session, now: int, settings: PlannerSettings, days: float,
            changes: Sequence[str]) -> tuple[History, list[ch.Change]]:
    """The history and the parsed changes, or a 400 saying what is wrong (nothing is made)."""
    try:
        proposed = ch.parse(changes)
        history = whatif_history.load(session, now, days)
        ch.apply(history, settings, proposed)
    except whatif_history.TooMuch as exc:
        raise BadRequest(str(exc), codes.WHATIF_TOO_LARGE) from None
    except ch.BadChange as exc:
        raise BadRequest(str(exc), codes.BAD_WHATIF_CHANGE) from None
    return history, proposed


def start(sessions: sessionmaker[Session], clock: Any, settings: PlannerSettings, days: float,
          changes: Sequence[str], user: str | None,
          reclaim: ReclaimSettings = ReclaimSettings()) -> tuple[str, threading.Thread]:
    """Make the job and start its thread; 400 for a bad change or too large a window, 409 while
    another job runs."""
    with session_scope(sessions) as session:
        now = clock.now()
        stamp = utcnow_naive(now)
        session.execute(update(m.WhatIfJob).where(m.WhatIfJob.running == RUNNING,
                                                  m.WhatIfJob.updated_at < utcnow_naive(now - STALE))
                        .values(running=None, status="failed", finished_at=stamp,
                                error="its process stopped before it finished"))
        busy = session.scalar(select(m.WhatIfJob.id).where(m.WhatIfJob.running == RUNNING))
        if busy is not None:
            raise Conflict(f"what-if {busy} is running: one at a time; wait for it (GET /v1/whatif/{busy})",
                           codes.WHATIF_RUNNING)
        history, proposed = prepare(session, now, settings, days, changes)
        job_id = str(uuid.uuid4())
        session.add(m.WhatIfJob(id=job_id, status=RUNNING, running=RUNNING, days=days,
                                changes=[str(c) for c in proposed], leases=len(history.leases), progress=0.0,
                                created_by=user, created_at=stamp, updated_at=stamp))
        try:
            session.flush()
        except IntegrityError:   # another request made one meanwhile
            raise Conflict("another what-if started meanwhile: one at a time", codes.WHATIF_RUNNING) from None
    thread = threading.Thread(target=run, args=(sessions, clock, job_id, history, settings, proposed, reclaim),
                              name=f"whatif-{job_id[:8]}", daemon=True)
    thread.start()
    return job_id, thread


def run(sessions: sessionmaker[Session], clock: Any, job_id: str, history: History,
        settings: PlannerSettings, proposed: Sequence[ch.Change], reclaim: ReclaimSettings = ReclaimSettings()) -> None:
    began = last = time.monotonic()

    def progress(done: float) -> None:
        nonlocal last
        t = time.monotonic()
        if t - last < REPORT_EVERY:
            return
        if t - began > MAX_SECONDS:
            raise TimeLimit(f"stopped after {MAX_SECONDS} s; ask for fewer days")
        last = t
        with session_scope(sessions) as session:
            session.execute(update(m.WhatIfJob).where(m.WhatIfJob.id == job_id).values(
                progress=round(done, 3), updated_at=utcnow_naive(clock.now())))

    result: dict[str, Any] | None = None
    error = None
    try:
        result = what_if(history, settings, proposed, progress, reclaim)
    except TimeLimit as exc:
        error = str(exc)
    except Exception as exc:   # the job says it failed; the process goes on
        log.exception("what-if %s failed", job_id)
        error = f"the replay failed: {exc.__class__.__name__}: {exc}"
    with session_scope(sessions) as session:
        stamp = utcnow_naive(clock.now())
        session.execute(update(m.WhatIfJob).where(m.WhatIfJob.id == job_id).values(
            status="failed" if error else "done", running=None, progress=1.0 if result else m.WhatIfJob.progress,
            result=result, error=error, updated_at=stamp, finished_at=stamp))


def get(session: Session, job_id: str) -> m.WhatIfJob:
    row = session.get(m.WhatIfJob, job_id)
    if row is None:
        raise NotFound(f"no what-if {job_id}", codes.WHATIF_NOT_FOUND)
    return row


def recent(session: Session) -> list[m.WhatIfJob]:
    return list(session.scalars(select(m.WhatIfJob).order_by(m.WhatIfJob.created_at.desc(), m.WhatIfJob.id)
                                .limit(KEPT)))

"""Fair share's decayed usage (domain/fairshare.py), summed by the database: one row per
(project, GPU model), not every allocation of the window fetched and converted in Python
(at 550 leases a day, four half-lives of a week are some 27,000 allocations, read under the
ledger lock on each replan and each create that plans).

Each record adds what fairshare.decayed_gpu_hours adds for it, by the same arithmetic in the
same order (seconds as session.to_epoch makes them, its end cut at now, the integral of the
decay over it, times its GPUs, over 3600), on SQLite and PostgreSQL; only the order of the
sum differs. Every term is positive, so each sum is within (n - 1) * 2**-53 of the exact one
(relative, n its records) and the two within twice that: 6e-12 at 27,000 records of one key."""
from __future__ import annotations

import math

from sqlalchemy import Float, case, func, literal, select, union_all
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.epoch import epoch_seconds
from gpu_tenancy.db.session import utcnow_naive


def decayed_usage(session: Session, now: int, half_life: int) -> dict[tuple[str, str], float]:
    """fairshare.decayed_gpu_hours of the allocations (whatever their lease's state) and the
    spent allocations (used on a host lost) in fair share's window: ended after four
    half-lives ago (older use has decayed to nothing), begun before now (later use has not
    been used yet). half_life <= 0: no decay."""
    since, until = utcnow_naive(now - 4 * half_life), utcnow_naive(now)
    records = union_all(*(select(t.project_id, t.gpu_model, t.gpus, t.start_at, t.end_at)
                          .where(t.end_at > since, t.start_at < until, t.gpus > 0)
                          for t in (m.Allocation, m.SpentAllocation))).subquery()
    now_ = literal(now)
    # its end cut at now, told by the stored time (a second parse of each row's end costs more)
    start, end = epoch_seconds(records.c.start_at), case((records.c.end_at > until, now_),
                                                         else_=epoch_seconds(records.c.end_at))
    if half_life > 0:
        lam = math.log(2) / half_life
        # the integral of exp(-lam * (now - t)) dt over [start, end], as fairshare computes it
        seconds = (func.exp(literal(-lam, Float) * (now_ - end), type_=Float)
                   - func.exp(literal(-lam, Float) * (now_ - start), type_=Float)) / literal(lam, Float)
    else:
        seconds = end - start
    hours = func.sum(records.c.gpus * seconds / literal(3600.0, Float), type_=Float)
    rows = session.execute(select(records.c.project_id, records.c.gpu_model, hours)
                           .group_by(records.c.project_id, records.c.gpu_model))
    return {(project, model): float(used) for project, model, used in rows}

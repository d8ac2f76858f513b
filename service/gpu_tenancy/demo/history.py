"""A past for the demo: N days of leases of the demo's projects, as the service would have
run them (their starts are the what-if replay's under the settings of now, so they fit the
hosts and the quotas), written as ended leases with their allocations. For the policy what-if
(`gpu-tenancy whatif`) and the figures pages. Deterministic for a seed; run once, on an
empty history (it adds leases each time)."""
from __future__ import annotations

import math
import random
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive
from gpu_tenancy.demo.seed import SHAPES
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.engine.ledger import host_from_row, quota_from_row
from gpu_tenancy.whatif.figures import start_bys
from gpu_tenancy.whatif.history import History, Lease
from gpu_tenancy.whatif.replay import replay

HOUR = 3600
# how often each demo shape is asked for: about as much of each model as it has GPUs
MIX = {"a100.x1": 30, "a100.x2": 20, "a100.x4": 15, "a100.x8": 8, "h100.x1": 10, "h100.x2": 6, "h100.x4": 3}


def requests(projects: list[str], start: int, days: float, per_day: float, rng: random.Random) -> list[Lease]:
    """Leases asked for over the days: Poisson arrivals, a mix of shapes (MIX),
    run times of 1 to 30 hours (log-normal), each asking for its run time rounded up to the hour."""
    out: list[Lease] = []
    t = float(start)
    end = start + days * 86400
    shapes = [(name, spec) for name, spec in SHAPES.items()]
    weights = [MIX[name] for name, _ in shapes]
    while True:
        t += rng.expovariate(per_day / 86400)
        if t >= end:
            return out
        name, (model, gpus, *_rest) = rng.choices(shapes, weights)[0]
        runtime = int(min(30 * HOUR, max(HOUR, rng.lognormvariate(math.log(5 * HOUR), 0.8))))
        asked = -(-runtime // HOUR) * HOUR
        out.append(Lease(str(uuid.UUID(int=rng.getrandbits(128), version=4)), rng.choice(projects), int(t), runtime,
                         gpus, 1, asked=asked, gpu_model=model, seq=len(out) + 1))


def seed_history(session: Session, now: int, days: float = 30, per_day: float = 40, seed: int = 1,
                 settings: PlannerSettings = PlannerSettings()) -> int:
    """Leases asked for over the `days` days before now, replayed on the hosts and quotas in the
    database; those that ended by now are written (ended, with their allocations). Returns how many."""
    rng = random.Random(seed)
    hosts = tuple(h for h in (host_from_row(r) for r in session.execute(select(m.Host.__table__).order_by(m.Host.name)))
                  if h.enabled)
    quotas = {(q.project_id, q.gpu_model): quota_from_row(q) for q in session.execute(select(m.Quota.__table__))}
    projects = sorted({p for p, _ in quotas})
    start = now - round(days * 86400)
    leases = requests(projects, start, days, per_day, rng)
    history = History(start, now, hosts, quotas, tuple(leases))
    out = replay(history, settings)
    shape_of = {(spec[0], spec[1]): name for name, spec in SHAPES.items()}
    start_by = start_bys(history, out)   # as the service would have told them
    written = 0
    for x in leases:
        began = out.start.get(x.jid)
        if began is None or out.end(x) > now:
            continue
        ended = out.end(x)
        cut = x.jid in out.ended_early   # reclaimed for a lease within its project's quota
        row = m.Lease(id=x.jid, name=f"history-{x.seq}", project_id=x.tenant, user_id="demo",
                      status="preempted" if cut else "ended",
                      early_end_at=utcnow_naive(ended) if cut else None, early_end_kind="reclaimed" if cut else None,
                      shape=shape_of[(x.gpu_model, x.gpus_per_vm)], gpu_model=x.gpu_model,
                      gpus_per_vm=x.gpus_per_vm, instances=x.vms, duration=x.duration,
                      earliest_start=utcnow_naive(x.arrival), start_at=utcnow_naive(began),
                      end_at=utcnow_naive(ended), priority=0, arrival=x.seq, queue_reasons=[],
                      first_eta=utcnow_naive(out.first_eta[x.jid]) if out.first_eta and x.jid in out.first_eta else None,
                      first_start_by=utcnow_naive(start_by[x.jid]) if x.jid in start_by else None,
                      created_at=utcnow_naive(x.arrival), updated_at=utcnow_naive(ended))
        session.add(row)
        for i, h in enumerate(out.hosts[x.jid]):
            session.add(m.Allocation(lease_id=x.jid, project_id=x.tenant, vm_index=i, host=hosts[h].name,
                                     gpu_model=x.gpu_model, gpus=x.gpus_per_vm, start_at=utcnow_naive(began),
                                     end_at=utcnow_naive(ended)))
        written += 1
    session.flush()
    return written

"""GPUs being released: a lease re-placed at once (its host went down, or its boot
failed) loses its VMs from the ledger, but the cloud takes a while to release their
GPUs after the delete. Until it confirms, they stay held (engine/held.py reads these
rows as holds), so neither the re-placed lease nor another is planned onto them and
refused the host."""
from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.engine import held

log = logging.getLogger(__name__)


def keep(session: Session, row: m.Lease, now: int, servers: list[m.Server] | None = None) -> None:
    """Hold the GPUs of the lease's VMs whose delete was just asked for (`servers`, default all
    of them), in the transaction that drops them. A down host's are left out: nothing is placed
    there anyway; and so are shelved and offloaded ones (a resuming lease's), which hold none."""
    up = set(session.scalars(select(m.Host.name).where(m.Host.up.is_(True))))
    for server in row.servers if servers is None else servers:
        if server.cloud_id and server.status not in ("DELETED", "SHELVED_OFFLOADED") and server.host in up:
            session.add(m.ReleasingGpus(lease_id=row.id, vm_index=server.vm_index, host=server.host,
                                        gpu_model=row.gpu_model, gpus=row.gpus_per_vm, cloud_id=server.cloud_id,
                                        since=utcnow_naive(now)))


def pending(lc) -> bool:
    with session_scope(lc.sessions) as session:
        return session.scalar(select(m.ReleasingGpus.id).limit(1)) is not None


def confirm(lc) -> bool:
    """Drop the holds whose GPUs the cloud has released (and measure how long it took);
    True if any came free."""
    with session_scope(lc.sessions) as session:
        pending = [(r.id, r.cloud_id, to_epoch(r.since)) for r in session.scalars(select(m.ReleasingGpus))]
    done = []
    for row_id, cloud_id, since in pending:
        try:
            if lc.cloud.server_state(cloud_id).status == "DELETED" and lc.cloud.gpus_released(cloud_id):
                done.append((row_id, since))
        except CloudError as exc:
            log.warning("asking the cloud whether server %s released its GPUs: %s", cloud_id, exc)
    if not done:
        return False
    now = lc.clock.now()
    with session_scope(lc.sessions) as session:
        for row_id, since in done:
            row = session.get(m.ReleasingGpus, row_id)
            if row is not None:
                session.delete(row)
                held.record_release(session, now, now - since)
    return True

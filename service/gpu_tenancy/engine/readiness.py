"""The GPU readiness probe of a lease that asks for it: each VM reports once it
has looked at its GPUs, and the lease is ready when every VM has said so."""
from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch, utcnow_naive
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine.events import record_event
from gpu_tenancy.errors import BadRequest, Conflict, TooManyRequests
from gpu_tenancy.guest.readiness_probe import probe_script, readiness_url, with_probe
from gpu_tenancy.timeutil import rfc3339

REPORTABLE = (LeaseState.PROVISIONING.value, LeaseState.ACTIVE.value)
# a VM's reports come at least this far apart: each is an event on the lease (the probe reports
# once, and retries a failed report after 15 s)
MIN_SPACING = 15


@dataclass(frozen=True)
class Report:
    instance: int
    ok: bool
    detail: str
    gpus_visible: int | None = None
    gpus_usable: int | None = None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def is_token_of(row: m.Lease, token: str) -> bool:
    """Whether `token` is the lease's secret (compared as digests, in constant time)."""
    return row.readiness_token is not None and hmac.compare_digest(token_digest(token), token_digest(row.readiness_token))


def token_digest(token: str) -> str:
    """What policy compares: digests, so the comparison tells nothing about the secret."""
    return hashlib.sha256(token.encode()).hexdigest()


def user_data(row: m.Lease, vm_index: int, base_url: str | None) -> str | None:
    """The user data of one VM: the user's own, plus the probe when the lease asks for it."""
    if not row.readiness_probe or not base_url:
        return row.user_data
    assert row.readiness_token is not None   # made with the lease that asks for the probe
    probe = probe_script(readiness_url(base_url, row.id), row.readiness_token, row.gpus_per_vm, vm_index)
    return with_probe(row.user_data, probe)


def record(session: Session, now: int, row: m.Lease, report: Report) -> None:
    """Keep the report on its VM (a later report replaces it) and tell it in the events. The
    lease's row locked and read again first: two VMs' reports at once take turns, so that the
    second sees the first's and tells that every VM is ready."""
    session.refresh(row, with_for_update=True)
    if not row.readiness_probe:
        raise Conflict(f"lease {row.id} did not ask for the readiness probe", "gpu_tenancy.no_readiness_probe")
    if row.status not in REPORTABLE:
        raise Conflict(f"lease {row.id} is {row.status}; readiness is reported while it is provisioning or "
                       "active", "gpu_tenancy.lease_not_running")
    server = next((s for s in row.servers if s.vm_index == report.instance), None)
    if server is None:
        raise BadRequest(f"lease {row.id} has no VM {report.instance} (it has {row.instances})",
                         "gpu_tenancy.unknown_instance")
    previous = to_epoch(server.readiness_at)
    if previous is not None and 0 <= now - previous < MIN_SPACING:
        raise TooManyRequests(f"VM {report.instance} of lease {row.id} reported its readiness {now - previous} s "
                              f"ago; report at most every {MIN_SPACING} s", MIN_SPACING - (now - previous),
                              codes.TOO_MANY_REQUESTS)
    server.readiness = "ready" if report.ok else "failed"
    server.readiness_detail = report.detail
    server.readiness_at = utcnow_naive(now)
    kind = "progress" if report.ok else "warning"
    record_event(session, row, kind, f"VM {report.instance} GPU readiness: {server.readiness}"
                 + (f" ({report.detail})" if report.detail else ""), now, "guest")
    if report.ok and is_ready(row):
        record_event(session, row, "progress", "every VM reported its GPUs ready", now, "guest")


def is_ready(row: m.Lease, servers=None) -> bool:
    """Active, and, when it asks for the probe, every VM has reported its GPUs ready.
    `servers`: the lease's servers when they were read apart from it (a page of leases)."""
    if row.status != LeaseState.ACTIVE.value:
        return False
    if not row.readiness_probe:
        return True
    by_vm = {s.vm_index: s.readiness for s in (row.servers if servers is None else servers)}
    return len(by_vm) == row.instances and all(r == "ready" for r in by_vm.values())


def summary(row: m.Lease, servers=None) -> dict | None:
    """The lease's readiness as the API shows it; None when it did not ask for the probe."""
    if not row.readiness_probe:
        return None
    servers = row.servers if servers is None else servers
    reports = [s.readiness for s in servers]
    if "failed" in reports:
        status = "failed"
    elif is_ready(row, servers):
        status = "ready"
    else:
        status = "waiting"
    return {"status": status,
            "instances": [{"instance": s.vm_index, "status": s.readiness or "waiting",
                           "detail": s.readiness_detail, "reported_at": rfc3339(to_epoch(s.readiness_at))}
                          for s in servers]}

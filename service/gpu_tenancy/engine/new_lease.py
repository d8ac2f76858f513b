"""A tenant's ask for a new lease, end to end: the checks the cloud answers (before any
transaction is open), then the lease made queued, with its audit record, in one
transaction (engine/leases.py: create), fitted into the current plan (engine/plan_insert.py) when
the queue is long, or else planned in a second transaction by a replan
(early_ends.plan_new), so that one replan can plan the leases of many requests. The API renders and audits;
these functions take its renderer and its audit call, and do the rest."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, ContextManager

from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.cloud.driver import CloudDriver
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.lease_ask import Boot, LeaseAsk
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.engine import audit as audit_log, early_ends, lease_insert, ledger, networking, plan_insert, volumes
from gpu_tenancy.engine.decision_hook import DecisionHook, decide
from gpu_tenancy.engine.leases import Caller, check_tenant_boot, create
from gpu_tenancy.engine.limits import Limits
from gpu_tenancy.errors import BadRequest

log = logging.getLogger(__name__)
Transaction = Callable[[], ContextManager[Session]]


def check_with_cloud(cloud: Callable[[], CloudDriver], caller: Caller, ask: LeaseAsk, readiness_configured: bool
                     ) -> networking.Choice:
    """What is checked before any transaction is open (the cloud's answers may be slow):
    the ask's parts a tenant-booted lease does not use, the readiness probe, the volume's
    owner; returns the lease's network. `cloud` makes or gives the driver: an ask that
    needs no cloud's answer makes none."""
    if ask.boot is Boot.TENANT:   # before any check of what it does not use
        check_tenant_boot(ask)
    if ask.readiness_probe and not readiness_configured:
        raise BadRequest("this service has no readiness_url configured, so VMs could not report their "
                         "GPU readiness; ask without readiness_probe", codes.READINESS_UNAVAILABLE)
    if ask.volume is not None and ask.volume.id:
        volumes.check_owned(cloud(), caller.project_id, ask.volume.id, caller.is_admin)
    if ask.boot is Boot.TENANT:   # the tenant's servers pick their own
        return networking.Choice()
    return networking.choose(cloud(), caller.project_id, ask.network, ask.floating_ip, caller.is_admin)


@dataclass(frozen=True)
class Made:
    row: m.Lease      # committed; planned unless planning failed
    rendered: dict    # as the answer shows it
    fitted: bool = False   # fitted into the plan (plan_insert), not replanned


def make_and_plan(transaction: Transaction, clock: Callable[[], int], config: Config, settings: PlannerSettings,
                  limits: Limits,
                  caller: Caller, ask: LeaseAsk, network: networking.Choice, hook: DecisionHook,
                  render: Callable[[m.Lease], dict],
                  audit: Callable[[Session, m.Lease, dict], m.AuditRecord],
                  fits: plan_insert.InsertCache | None = None,
                  before_fit: plan_insert.BeforeFit | None = None) -> Made:
    """Make the lease, queued, with its audit record (`audit(session, row, rendered)`) in one
    transaction, so that no lease is ever without its record, and, when the queue is long,
    fitted into the current plan in that same transaction (plan_insert.fit_made, with `fits`:
    this process's copy of the plan, `before_fit` called with it); if it was not, planned after by a
    replan (plan_created)."""
    lease_id = ledger.new_lease_id()   # the same in the question to the decision service and in the lease
    fitted: list[plan_insert.Snapshot] = []   # the plan with the lease, once fitted into it

    def make(session: Session, asked: DecisionHook) -> tuple[m.Lease, dict, m.AuditRecord]:
        row = create(session, clock(), limits, caller, ask, asked, lease_id)
        fitted.clear()
        # the lease's arrival, network and queue place go in one UPDATE, with the audit record
        with session.no_autoflush:
            network.apply(row)
            if fits is not None:
                snapshot = plan_insert.fit_made(session, clock, settings, row, fits, before_fit)
                if snapshot is not None:
                    fitted.append(snapshot)
        rendered = render(row)
        record = audit(session, row, rendered)
        if fitted:   # under the ledger lock since the fit: one statement and the commit, at once
            lease_insert.commit_fitted(session, row, record, fitted[0].recent)
        return row, rendered, record
    row, rendered, record = decide(hook, transaction, make)
    if fitted:   # planned in the same transaction: the answer and its record already say where
        assert fits is not None
        fits.confirm(fitted[0])
        return Made(row, rendered, fitted=True)
    planned = plan_created(transaction, clock, config, settings, row.id, record.id, render)  # the record's id: once committed
    return Made(row, planned or rendered)


def plan_created(transaction: Transaction, clock: Callable[[], int], config: Config, settings: PlannerSettings,
                 lease_id: str, record_id: int, render: Callable[[m.Lease], dict]) -> dict | None:
    """The committed lease, planned (early_ends.plan_new: the engine's whole replan, reclaim and
    preemption included, so the answer carries the reasons and ETA the engine's next pass gives),
    as the answer shows it, and its
    audit record brought up to that. None if planning failed: the lease stays queued,
    and the engine's next replan plans it (the answer still tells it was made).

    The ledger lock is held only for the replan and its write: the answer is rendered
    once that transaction has committed (its objects stay loaded), and the record is
    amended in a transaction of its own, while other requests replan."""
    try:
        with transaction() as session:
            planned = early_ends.plan_new(session, clock, config, settings, lease_id)
    except Exception:
        log.exception("planning lease %s failed; it waits for the engine's replan", lease_id)
        return None
    rendered = render(planned)
    try:
        with transaction() as session:
            audit_log.amend_after(session, record_id, rendered)
    except Exception:   # the lease is planned all the same; only its record tells the lease as asked for
        log.exception("amending the audit record of lease %s failed", lease_id)
    return rendered

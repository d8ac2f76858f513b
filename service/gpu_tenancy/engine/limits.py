"""The limits no tenant can pass, whatever its quota: how long a lease lasts, how
far ahead it starts, how many leases wait at once; and the guard that keeps a
lease beyond any plannable time (a row written before these limits, or by hand)
from stopping the planner for everyone.

The limits are read from the configuration once (Limits.from_config), carried by the
API's runtime and passed to each check: nothing here is global."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import utcnow_naive
from gpu_tenancy.domain.failures import FailureClass
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine.events import record_transition
from gpu_tenancy.errors import BadRequest, Forbidden

DAY = 86400
# The guard's bound: no queued lease may last longer, or start further ahead, than this.
# It is beyond any configurable limit (config.py: 10 years of duration, 50 ahead), keeps
# every planned time far short of year 9999 (past which no time can be stored or
# written), and is a number PostgreSQL's 32-bit INTEGER column can be compared with.
PLANNABLE_SECONDS = 60 * 365 * DAY


@dataclass(frozen=True)
class Limits:
    max_duration: int = 90 * DAY
    max_start_ahead: int = 365 * DAY
    waiting_per_project: int = 100
    waiting_per_user: int = 30

    @classmethod
    def from_config(cls, config: Config) -> Limits:
        """The limits of a gpu_tenancy.config.Config."""
        return cls(config.max_lease_duration_days * DAY, config.max_start_ahead_days * DAY,
                   config.max_waiting_leases_per_project, config.max_waiting_leases_per_user)

    def check_duration(self, duration: int) -> None:
        most = self.max_duration
        if duration > most:
            raise BadRequest(f"duration {days(duration)} is over this service's maximum of {days(most)}",
                             "gpu_tenancy.over_service_max_duration")

    def check_ahead(self, field: str, at: int, now: int) -> None:
        most = self.max_start_ahead
        if at - now > most:
            raise BadRequest(f"{field} is {days(at - now)} ahead; this service takes leases at most "
                             f"{days(most)} ahead", "gpu_tenancy.start_too_far")

    def check_waiting(self, project_id: str, user_id: str, project: int, user: int) -> None:
        """Refuse a new lease when the project, or the user, has as many waiting (`project`,
        `user`: engine/ask_facts.py counts them) as it may: every waiting lease is planned
        again on every change, under the ledger lock. A reservation booked ahead (scheduled,
        not started) counts too: each is a hold that every plan reads, and a member could
        otherwise book a year of hourly slots. A count past the limit (it was lowered) need not be
        exact: it is said as "more than" the limit."""
        if project >= self.waiting_per_project:
            raise Forbidden(f"project {project_id} has {counted(project, self.waiting_per_project)} leases waiting, "
                            "the most it may have at once; cancel one or wait for one to start",
                            "gpu_tenancy.too_many_waiting")
        if user >= self.waiting_per_user:
            raise Forbidden(f"user {user_id} has {counted(user, self.waiting_per_user)} leases waiting in project "
                            f"{project_id}, the most a user may have at once; cancel one or wait for one to start",
                            "gpu_tenancy.too_many_waiting")


def counted(count: int, most: int) -> str:
    """A waiting count as check_waiting tells it."""
    return f"more than {most}" if count > most else str(count)


def days(seconds: int) -> str:
    value = seconds / DAY
    if value == 1:
        return "1 day"
    return f"{value:.0f} days" if value >= 10 or value.is_integer() else f"{value:.1f} days"


def fail_unplannable(session: Session, now: int, actor: str) -> None:
    """Fail every queued lease that could never be planned (it lasts, or starts, beyond
    the guard's bound), with its reason, so that the planner plans the others. One
    query that finds nothing when all is well."""
    lease = m.Lease
    bad = session.scalars(select(lease).where(
        lease.status == LeaseState.QUEUED.value,
        (lease.duration > PLANNABLE_SECONDS) | (lease.duration < 1)
        | (lease.earliest_start > utcnow_naive(now + PLANNABLE_SECONDS))))
    for row in bad:
        reason = (f"it cannot be planned: it lasts {days(row.duration)} from {row.earliest_start:%Y-%m-%d}, "
                  f"beyond any time this service plans; ask again within the service's limits")
        row.failure_class, row.failure_message = FailureClass.INTERNAL.value, reason
        record_transition(session, row, LeaseState.FAILED, now, actor, reason)
        row.queue_position, row.queue_eta, row.queue_reasons = None, None, []
        row.start_at = row.end_at = None

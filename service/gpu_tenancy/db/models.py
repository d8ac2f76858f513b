"""SQLAlchemy models. The allocations table is the ledger: no two allocations
may put more GPUs on a host at any instant than it has."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import (JSON, BigInteger, Boolean, CheckConstraint, DateTime, Float, ForeignKey, Index,
                        Integer, String, Text, UniqueConstraint, false, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


# Times are stored as naive UTC datetimes; the repositories convert to epoch seconds.
UTC = DateTime(timezone=False)


class Host(Base):
    """A GPU host as the cloud last reported it (refreshed by the engine)."""
    __tablename__ = "hosts"
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    up: Mapped[bool] = mapped_column(Boolean, default=True)
    drained: Mapped[bool] = mapped_column(Boolean, default=False)  # set by an admin
    aggregate: Mapped[str | None] = mapped_column(String(255), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTC)


class Shape(Base):
    __tablename__ = "shapes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    vcpus: Mapped[int] = mapped_column(Integer)
    ram_mb: Mapped[int] = mapped_column(Integer)
    disk_gb: Mapped[int] = mapped_column(Integer)
    pci_alias: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTC)
    retired_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    __table_args__ = (CheckConstraint("gpus > 0", name="ck_shapes_gpus"),)


class Image(Base):
    """An entry of the standard image catalog."""
    __tablename__ = "images"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    cloud_ref: Mapped[str] = mapped_column(String(255))  # Glance image id
    description: Mapped[str] = mapped_column(String(512), default="")
    created_at: Mapped[datetime] = mapped_column(UTC)
    retired_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)


class Quota(Base):
    __tablename__ = "quotas"
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer)
    borrow_gpus: Mapped[int] = mapped_column(Integer, default=0)
    max_duration: Mapped[int | None] = mapped_column(Integer, nullable=True)  # seconds
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    updated_at: Mapped[datetime] = mapped_column(UTC)
    __table_args__ = (CheckConstraint("gpus >= 0 AND borrow_gpus >= 0 AND weight > 0",
                                      name="ck_quotas_nonneg"),)


# cancelled or expired with its own flavor still in the cloud (engine/lease_flavor.py: remove_unstarted)
LEFTOVERS = text("flavor_id IS NOT NULL AND status IN ('cancelled', 'expired')")
# not finished (domain/states.py: FINAL, the states with no way out; tests/functional/test_lease_names.py
# holds the two the same): where a lease's name is the project's handle for it
UNFINISHED = text("status NOT IN ('cancelled', 'ended', 'expired', 'failed', 'preempted')")
EARLY_FOR = text("early_end_for IS NOT NULL")
NAME_INDEX = "uq_leases_project_name_unfinished"   # engine/leases.py: name_written knows its refusal by it


class Lease(Base):
    __tablename__ = "leases"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)
    shape: Mapped[str] = mapped_column(ForeignKey("shapes.name"))
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus_per_vm: Mapped[int] = mapped_column(Integer)
    instances: Mapped[int] = mapped_column(Integer)
    duration: Mapped[int] = mapped_column(Integer)  # seconds
    earliest_start: Mapped[datetime] = mapped_column(UTC)
    # the start it was asked with, never moved (a re-placement plans it again from a new
    # earliest_start): what its wait counts from; NULL (made before 0030): earliest_start
    asked_start: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    latest_start: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    start_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)   # committed start
    end_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)     # committed end
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # the order leases were asked in (the id of the lease's "requested" event, a monotonic
    # sequence): breaks ties of created_at, which has whole seconds
    arrival: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    borrowing: Mapped[bool] = mapped_column(Boolean, default=False)
    image: Mapped[str | None] = mapped_column(String(128), nullable=True)
    volume_size_gb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    volume_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    key_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    user_data: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the planner's last word on a waiting lease
    queue_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    queue_eta: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    queue_reasons: Mapped[list] = mapped_column(JSON, default=list)
    # the first ETA its owner was shown (when it was created, unless it had no slot then):
    # what ETA honesty (domain/eta_honesty.py) holds its real start against
    first_eta: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    # the start-by told with it (domain/start_by.py), held against its real start the same way;
    # when it was told them, until its first start (then its lateness is a StartBySample, and a
    # lease queued again after it ran is overdue by them no more); and the margin ratio its queue
    # place was last written with (its start-by now: api/lease_view.py)
    first_start_by: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    eta_told_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    start_by_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    # and what that ratio was learnt from: {"source", "samples", "load_class"} (domain/start_by.py:
    # MarginBasis), told beside the start-by; None: written before it was kept
    start_by_basis: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    # a waiting lease's planned hosts, one per VM (with start_at/end_at: its place in the plan),
    # and, when a create fitted it into the plan, the ledger's count of such fits then: what the
    # other processes read to fit the next lease around it (engine/plan_insert.py)
    # NULL, not JSON null, when cleared: a fit reads NULL as "not placed on known hosts" (plan_insert.build)
    planned_hosts: Mapped[list | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    plan_seq: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    # with the planner's keep_etas: a plan once broke that ETA, so the lease goes by it until it starts
    eta_guarded: Mapped[bool] = mapped_column(Boolean, default=False)
    priority_class: Mapped[str | None] = mapped_column(String(64), nullable=True)  # its name when asked for
    preemptible: Mapped[bool] = mapped_column(Boolean, default=False)
    # ended early with notice (reclaimed or preempted): when, why, and for which lease
    early_end_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    early_end_kind: Mapped[str | None] = mapped_column(String(16), nullable=True)
    early_end_for: Mapped[str | None] = mapped_column(String(36), nullable=True)
    early_end_for_project: Mapped[str | None] = mapped_column(String(64), nullable=True)
    early_end_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    early_end_from: Mapped[datetime | None] = mapped_column(UTC, nullable=True)  # the end it had before
    failure_class: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failure_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    warned_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    # parked by an idle rule (engine/park.py): when, its held resume slot's start, and the
    # seconds of its time it had left then
    parked_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    resume_by: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    remaining: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # opt-in: the VMs run the GPU readiness probe and report with this secret. The server default
    # is 0004's, which (unlike 0003's, 0011's and 0017's) was never taken off: said here, not dropped
    # by a migration that would copy the whole leases table on SQLite
    readiness_probe: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    readiness_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # who boots its VMs: "service" (the standard image, with the volume) or "tenant" (the
    # project's members, with the lease's flavor); the lease's own flavor once made
    boot: Mapped[str] = mapped_column(String(16), default="service", server_default="service")
    flavor_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    flavor_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # the lease's network (engine/networking.py), chosen when it was asked for: by which rule
    # (request, only, default, auto; none: VMs boot as the driver does without one), its id
    # (none when auto-allocated) and name; floating IPs asked for; who logs in (at boot)
    network_via: Mapped[str | None] = mapped_column(String(16), nullable=True)
    network_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    network_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    floating_ip: Mapped[bool] = mapped_column(Boolean, default=False)
    ssh_user: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTC)
    updated_at: Mapped[datetime] = mapped_column(UTC)

    allocations: Mapped[list["Allocation"]] = relationship(
        back_populates="lease", cascade="all, delete-orphan", order_by="Allocation.vm_index")
    servers: Mapped[list["Server"]] = relationship(
        back_populates="lease", cascade="all, delete-orphan", order_by="Server.vm_index")
    failures: Mapped[list["LeaseFailure"]] = relationship(
        cascade="all, delete-orphan", order_by="LeaseFailure.id")
    __table_args__ = (
        CheckConstraint("instances > 0 AND duration > 0 AND gpus_per_vm > 0", name="ck_leases_positive"),
        # a project's leases in the listing's order (api/lease_view.py: after): a page after a
        # marker is a range of it (0032; ix_leases_project_created before, without the id)
        Index("ix_leases_project_created_id", "project_id", "created_at", "id"),
        # every project's leases in the listing's order (api/lease_view.py: PAGE, NEWEST_FIRST,
        # IN_ANY_PROJECT): a page read off the index, not every lease read and sorted
        Index("ix_leases_created", "created_at", "id"),
        # a new lease's checks (engine/ask_facts.py): the name asked, the project's and user's waiting
        Index("ix_leases_project_name", "project_id", "name"),
        # one unfinished lease of a name in a project, even when two requests pass the check at once
        # (engine/leases.py: check_name_free); a finished lease's name may be given again
        Index(NAME_INDEX, "project_id", "name", unique=True,
              postgresql_where=UNFINISHED, sqlite_where=UNFINISHED),
        Index("ix_leases_project_status_user", "project_id", "status", "user_id"),
        # the leases ended early for another (engine/early_ends.py: yielded_pairs), found from it:
        # an index of those few rows alone (0032)
        Index("ix_leases_early_end_for", "early_end_for", postgresql_where=EARLY_FOR, sqlite_where=EARLY_FOR),
        # the engine's pass reads the cancelled or expired leases whose flavor is still in the cloud
        # (engine/lease_flavor.py: remove_unstarted): an index of those few rows alone
        Index("ix_leases_flavor_leftovers", "id", "project_id", postgresql_where=LEFTOVERS, sqlite_where=LEFTOVERS),
    )


class PriorityClass(Base):
    """An admin-defined class a lease may ask for: its place in the order, whether it
    is preemptible, and which projects may use it (None: every project)."""
    __tablename__ = "priority_classes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    priority: Mapped[int] = mapped_column(Integer)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=False)
    projects: Mapped[list | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    description: Mapped[str] = mapped_column(String(512), default="")
    updated_at: Mapped[datetime] = mapped_column(UTC)


class Budget(Base):
    """GPU-hours a project may use of one GPU model per period: every calendar
    month, or one custom range [start_at, end_at)."""
    __tablename__ = "budgets"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpu_hours: Mapped[float] = mapped_column(Float)
    period: Mapped[str] = mapped_column(String(8))   # month or range
    start_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    end_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTC)
    __table_args__ = (CheckConstraint("gpu_hours >= 0", name="ck_budgets_hours"),)


class Allocation(Base):
    """The ledger: a VM's GPUs on a host over [start_at, end_at)."""
    __tablename__ = "allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    vm_index: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255), index=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    start_at: Mapped[datetime] = mapped_column(UTC)
    end_at: Mapped[datetime] = mapped_column(UTC, index=True)
    borrowing: Mapped[bool] = mapped_column(Boolean, default=False)
    lease: Mapped[Lease] = relationship(back_populates="allocations")
    __table_args__ = (
        UniqueConstraint("lease_id", "vm_index", name="uq_allocations_lease_vm"),
        CheckConstraint("gpus > 0 AND end_at > start_at", name="ck_allocations_window"),
    )


class SpentAllocation(Base):
    """GPUs a running lease really used on VMs it then lost (its host went down):
    the lease is re-placed under new allocations, and this keeps the used part
    counted in usage, budgets and fair share."""
    __tablename__ = "spent_allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    host: Mapped[str] = mapped_column(String(255))
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    start_at: Mapped[datetime] = mapped_column(UTC)
    end_at: Mapped[datetime] = mapped_column(UTC, index=True)
    __table_args__ = (CheckConstraint("gpus > 0 AND end_at > start_at", name="ck_spent_allocations_window"),)


class ReleasingGpus(Base):
    """GPUs of a VM the engine dropped from a lease it re-placed at once (its host went
    down, or its boot failed), which the cloud has not released yet: held until it has
    (engine/releasing.py), as a lease's allocation is."""
    __tablename__ = "releasing_gpus"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), index=True)
    vm_index: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255), index=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    cloud_id: Mapped[str] = mapped_column(String(64))
    since: Mapped[datetime] = mapped_column(UTC)   # when its delete was asked for
    __table_args__ = (CheckConstraint("gpus > 0", name="ck_releasing_gpus_gpus"),)


class ReleaseTime(Base):
    """How long the cloud took from deleting a lease's VMs to releasing their GPUs
    (measured), or says it takes (nominal, one row): the release allowance comes from these."""
    __tablename__ = "release_times"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))   # measured, nominal
    at: Mapped[datetime] = mapped_column(UTC)
    seconds: Mapped[int] = mapped_column(Integer)
    __table_args__ = (CheckConstraint("seconds >= 0", name="ck_release_times_seconds"),)


class Server(Base):
    """A VM the cloud made (or is making) for a lease."""
    __tablename__ = "servers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), index=True)
    vm_index: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255))
    cloud_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Nova's status words; the longest, SHELVED_OFFLOADED (a parked lease's VMs), is 17
    status: Mapped[str] = mapped_column(String(32))
    fault: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the guest's last readiness report: ready or failed, in its own words
    readiness: Mapped[str | None] = mapped_column(String(16), nullable=True)
    readiness_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    readiness_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    # its addresses once ACTIVE: [{"network", "ip", "kind": fixed|floating}]
    addresses: Mapped[list | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTC)
    lease: Mapped[Lease] = relationship(back_populates="servers")
    __table_args__ = (UniqueConstraint("lease_id", "vm_index", name="uq_servers_lease_vm"),)


class LeaseActivity(Base):
    """What a lease's guest agent last told of its GPUs (engine/gpu_activity.py): one row per
    lease that reports. The hours' figures are in GpuUseHour."""
    __tablename__ = "lease_activity"
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), primary_key=True)
    first_report_at: Mapped[datetime] = mapped_column(UTC)
    last_report_at: Mapped[datetime] = mapped_column(UTC)
    busy_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)   # last report with a GPU in use
    idle_warned_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    # {"<vm index>": epoch of its last report}, and {"<vm index>": [[utilization %, memory used MiB], ...]}
    reported: Mapped[dict] = mapped_column(JSON, default=dict)
    latest: Mapped[dict] = mapped_column(JSON, default=dict)


class GpuUseHour(Base):
    """A lease's measured and used GPU-seconds in one hour (compact: a row per lease and
    hour, whatever the number of reports)."""
    __tablename__ = "gpu_use_hours"
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), primary_key=True)
    hour: Mapped[datetime] = mapped_column(UTC, primary_key=True, index=True)
    project_id: Mapped[str] = mapped_column(String(64))
    gpu_model: Mapped[str] = mapped_column(String(64))
    measured_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)   # GPUs reported x seconds
    used_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)       # ... weighted by utilisation


class Event(Base):
    """A lease's history: transitions, progress, warnings, failures."""
    __tablename__ = "events"
    # a page of a lease's events, either order, is a range of it from its marker (engine/events.py:
    # of_lease); it serves the reads by lease alone too (a prefix)
    __table_args__ = (Index("ix_events_lease_id_id", "lease_id", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTC)
    actor: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # transition, progress, warning, failure
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    message: Mapped[str] = mapped_column(Text)
    lease: Mapped[Lease] = relationship()  # lets a new lease and its first events go in one flush


class Lock(Base):
    """Named database locks: 'ledger' serialises allocation decisions (and counts replans);
    'engine' is the leader lease (holder + expiry)."""
    __tablename__ = "locks"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(128), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)
    # 'ledger': bumped by every replan (ledger.replan_locked), so that what is read from a plan
    # can be kept until the plan may have moved (engine/capacity.py: PlannedCache)
    generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # 'ledger': leases a create fitted into the plan (engine/plan_insert.py), counted for good
    inserted: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # 'ledger': the last fits, as JSON (engine/plan_insert.py: Recent), read by each fit's claim
    recent: Mapped[str | None] = mapped_column(Text, nullable=True)


class ServiceSecret(Base):
    """A random secret the first process made and every process of the service reads
    (engine/service_secrets.py): what they must agree on when the operator set nothing."""
    __tablename__ = "service_secrets"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[str] = mapped_column(String(128))   # hex


class MetricRollup(Base):
    """An all-time counter of /metrics summed up to the watermark (the row named 'through',
    its value in epoch seconds): engine/metric_rollups.py folds each closed stretch in once,
    so a scrape reads these and what happened since, not all of history."""
    __tablename__ = "metric_rollups"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class AuditRecord(Base):
    """A change someone asked for through the API: who, when, from where, what,
    before and after. Written in the change's own transaction; the engine's own
    lease actions are in events instead."""
    __tablename__ = "audit_records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTC, index=True)
    user_id: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    user_project_id: Mapped[str | None] = mapped_column(String(255), nullable=True)  # the token's
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    remote_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    action: Mapped[str] = mapped_column(String(32), index=True)
    target_type: Mapped[str] = mapped_column(String(16))
    target_id: Mapped[str] = mapped_column(String(255), index=True)
    target_project_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    before: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    after: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    outcome: Mapped[str] = mapped_column(String(16))


class LeaseFailure(Base):
    """One failed attempt of a lease (a boot, a host lost), classified, with what the
    engine did about it: retried elsewhere, re-placed, or failed the lease."""
    __tablename__ = "lease_failures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTC)
    attempt: Mapped[int] = mapped_column(Integer)
    failure_class: Mapped[str] = mapped_column(String(32), index=True)
    message: Mapped[str] = mapped_column(Text)
    hosts: Mapped[list] = mapped_column(JSON, default=list)
    action: Mapped[str] = mapped_column(String(16))   # retried, replaced, failed
    retry_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)


class ProjectWebhook(Base):
    """Where a project wants lease notices (the before-end warning) POSTed, and the
    secret they are signed with (HMAC-SHA256)."""
    __tablename__ = "project_webhooks"
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(String(2048))
    secret: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(UTC)
    updated_at: Mapped[datetime] = mapped_column(UTC)


class WebhookDelivery(Base):
    """The outbox: a notice written with the event it tells of, sent (and retried) after."""
    __tablename__ = "webhook_deliveries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)   # pending, delivered, failed, dropped
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTC)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTC)
    delivered_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)


class BusNotice(Base):
    """The message-bus outbox (engine/notifications.py): a lease notification written in the
    transaction of the change it tells of, sent to the bus after, in order, retried until sent.
    Not tied to the lease row: a notice outlives a lease that is removed."""
    __tablename__ = "bus_notices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(String(36), index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)   # JSON
    status: Mapped[str] = mapped_column(String(16), index=True)   # pending, sent
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTC)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTC)
    sent_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)


class DashboardSession(Base):
    """A dashboard login, kept server side: the browser holds only a random id
    (its SHA-256 is the key here) in an httpOnly cookie. The Keystone tokens
    never leave the service; in dev mode (noauth2) there are none."""
    __tablename__ = "dashboard_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(255))
    user_name: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    project_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    roles: Mapped[list] = mapped_column(JSON, default=list)
    projects: Mapped[list] = mapped_column(JSON, default=list)  # [{"id", "name"}] the user may switch to
    token: Mapped[str | None] = mapped_column(Text, nullable=True)           # project-scoped
    unscoped_token: Mapped[str | None] = mapped_column(Text, nullable=True)  # to rescope on a switch
    csrf_token: Mapped[str] = mapped_column(String(64))
    dev_mode: Mapped[bool] = mapped_column(Boolean, default=False)
    notices: Mapped[list] = mapped_column(JSON, default=list)  # [[kind, message]] for the next page
    created_at: Mapped[datetime] = mapped_column(UTC)
    expires_at: Mapped[datetime] = mapped_column(UTC, index=True)


class WhatIfJob(Base):
    """A policy what-if an admin asked for (gpu_tenancy/whatif): the history's days, the
    proposed changes, its progress while a thread replays it, and its figures once done.
    `running` is "running" while it runs and null after: unique, so one runs at a time."""
    __tablename__ = "whatif_jobs"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))   # running, done, failed
    running: Mapped[str | None] = mapped_column(String(8), nullable=True, unique=True)
    days: Mapped[float] = mapped_column(Float)
    changes: Mapped[list] = mapped_column(JSON, default=list)
    leases: Mapped[int] = mapped_column(Integer)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    result: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTC, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTC)
    finished_at: Mapped[datetime | None] = mapped_column(UTC, nullable=True)


class StartBySample(Base):
    """A lease that waited, at its first start: its lateness past its first ETA over the wait it
    was told (domain/start_by.py: lateness_ratio). Each project's last WINDOW are kept, what its
    margin is learnt from, and its load class's margin (engine/start_by_margins.py)."""
    __tablename__ = "start_by_samples"
    lease_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    started_at: Mapped[datetime] = mapped_column(UTC)
    ratio: Mapped[float] = mapped_column(Float)
    # its project's load class when it started (domain/start_by.py: load_class); None: not known
    load_class: Mapped[int | None] = mapped_column(Integer, nullable=True)


class StartByMargin(Base):
    """Each project's margin ratio (domain/start_by.py: margin_basis) as the engine last computed it
    (engine/start_by_margins.py); project "" is everyone's, for a project with no row."""
    __tablename__ = "start_by_margins"
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    ratio: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)   # the ratios it is the quantile of
    computed_at: Mapped[datetime] = mapped_column(UTC)
    # what it was learnt from (domain/start_by.py: MarginBasis), and the project's load class then;
    # None: computed before these were kept
    source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    load_class: Mapped[int | None] = mapped_column(Integer, nullable=True)

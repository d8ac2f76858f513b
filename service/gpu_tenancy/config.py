"""Service configuration: a YAML file, then GPU_TENANCY_* environment variables."""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml
from cryptography.fernet import Fernet

from gpu_tenancy.cloud import registry
from gpu_tenancy.cloud.builtin import DEMO_CLOUD  # noqa: F401  (the demo's cloud, imported from here)
from gpu_tenancy.domain.gpu_activity import IdleRule
from gpu_tenancy.domain.planner import (DEFAULT_AGE_SIZE_GPU_HOURS, DEFAULT_EMPTY_TOGETHER, DEFAULT_KEEP_ETAS,
                                        DEFAULT_QUEUED_CHARGE, DEFAULT_QUEUED_CHARGE_SPARES_GPUS, DEFAULT_WAIT_BOUND,
                                        DEFAULT_WAIT_BOUND_GPU_HOURS, DEFAULT_WAIT_BOUND_LEASES)

OLD_CLOUD_SPELLING = ("cloud_driver", "simulated_cloud", "clouds_yaml_cloud", "clouds_yaml_file", "cloud_network",
                      "cloud_project_role", "gpu_resource_classes", "flavor_extra_specs")
BLAZAR_WHEN_QUEUED = ("refuse", "pending")


@dataclass
class Config:
    database_url: str = "sqlite:///gpu-tenancy.db"
    # keystone (keystonemiddleware) in production; noauth2 only for the demo and tests
    auth_strategy: str = "keystone"
    keystone_authtoken: dict = field(default_factory=dict)  # passed to keystonemiddleware
    policy_file: str | None = None
    # the cloud driver and its options: {driver: <name>, options: {...}}, the names and options
    # of cloud/registry.py (README "Pointing it at your own cloud"); none: the simulated demo cloud
    cloud: dict = field(default_factory=dict)
    # the old flat spelling of the same, still read when `cloud` is not given: cloud_driver, then
    # the simulated driver's file and the openstack driver's options under their old names
    cloud_driver: str | None = None
    simulated_cloud: str | None = None
    clouds_yaml_cloud: str | None = None
    clouds_yaml_file: str | None = None
    cloud_network: str | None = None
    cloud_project_role: str | None = None
    gpu_resource_classes: dict | None = None
    flavor_extra_specs: dict | None = None
    # the service's URL as a lease's VMs reach it, for their GPU readiness reports
    # (unset: leases cannot ask for the readiness probe)
    readiness_url: str | None = None
    run_engine: bool = True          # run the engine in this process (the demo does)
    engine_tick_seconds: int = 5
    # with at least this many leases waiting, a create fits its lease into the current plan instead
    # of replanning them all (engine/plan_insert.py; the engine's next replan plans it in full)
    plan_insert_min_waiting: int = 100
    # a replan the API's wake asks for after a create fitted into the plan or a cancel taken out of
    # it (the queue is long: above) may wait: it begins at least this long after the engine's last
    # full replan began (engine/runner.py: wake; 0: at once, as every other wake)
    engine_wake_min_interval_seconds: float = 3.0
    provisioning_poll_seconds: float = 0.25  # while a VM boots or is deleted (openstacksdk's own wait: 2 s)
    host_refresh_seconds: int = 60
    leader_lease_seconds: int = 30
    # on SIGTERM, how long the engine's pass under way (and webhook POSTs) may take to end; then the
    # process exits without it, as a crash would (stopping.py). Under the stop's own limits: systemd's
    # 90 s, the start-stop-daemon's TERM/20 of the ansible role
    engine_stop_seconds: float = 15.0
    warn_before_end_seconds: int = 3600  # lead time of the before-end warning (event and webhook)
    # outbox and decision hook: a webhook POST's total deadline (connect to status line, not per read;
    # at most WEBHOOK_TIMEOUT_MAX: a hung receiver holds a worker that long), the outbox's sending
    # threads, how many of them one project may hold at once, and how many are kept for projects
    # whose receiver is not failing and has nothing under way (engine/outbox.py)
    webhook_timeout_seconds: float = 5.0
    webhook_workers: int = 8
    webhook_workers_per_target: int = 2
    webhook_workers_reserved: int = 2
    webhook_max_attempts: int = 6
    webhook_backoff_seconds: int = 10     # doubles per failed delivery ...
    webhook_backoff_max_seconds: int = 600  # ... up to this
    # networks webhooks may be sent to although not global (loopback, private, ...): see engine/webhook_targets.py
    webhook_allowed_networks: list = field(default_factory=list)
    # lease notifications on the message bus, with Blazar's event types and payload (engine/notifications.py):
    # an oslo.messaging transport URL (rabbit://user:pass@host:5672/) turns them on; unset, none is written
    notifications_transport_url: str | None = None
    notifications_topic: str = "notifications"
    notifications_exchange: str = "openstack"     # oslo.messaging's control_exchange, Blazar's too
    notifications_publisher_id: str = "gpu-tenancy.lease"   # Blazar's is blazar.lease
    notifications_backoff_max_seconds: int = 300   # a failed send is retried, doubling from 1 s up to this
    # billing: a price per GPU-hour for each GPU model, giving /v1/usage a rated total; none: no rating
    usage_prices: dict = field(default_factory=dict)
    usage_currency: str | None = None
    boot_timeout_seconds: int = 1800   # a lease's VMs not all ACTIVE this long after it began starting: boot_timeout
    # GPUs held but idle (README "Idle GPUs"): a GPU under this utilisation is idle; a lease idle
    # this long counts as idle now in the figures; and the operator's rules, each
    # {project_id | priority_class (or neither: the default), warn_after_minutes, then: none | end | park,
    # then_after_minutes}
    idle_utilization_percent: float = 5.0
    idle_minutes: int = 30
    idle_rules: list = field(default_factory=list)
    # how long the agents' hourly GPU-use figures are kept (engine/housekeeping.py prunes older ones;
    # /metrics' all-time counters keep counting them)
    gpu_use_retention_days: int = 400
    # a parked lease's resume slot starts no sooner than this after it parked (engine/park.py)
    park_grace_seconds: int = 900
    # the least time planned between a lease's end and the next use of its GPUs (the cloud's
    # delete-to-release time); the engine measures the cloud's own and plans with more if it is slower
    release_allowance_seconds: int = 0
    retry_backoff_seconds: int = 30      # first wait before a host-level fault is retried elsewhere
    retry_backoff_max_seconds: int = 600  # the wait doubles per attempt up to this
    fairshare_half_life_seconds: int = 7 * 24 * 3600
    # a lease that has waited this long goes before fair share, in the order leases began to
    # wait, so that later arrivals cannot keep pushing it back (null, the default: fair share alone)
    planner_wait_bound_seconds: int | None = DEFAULT_WAIT_BOUND
    # ... or that has waited this many GPU-hours (its GPUs times the hours it waited), so that the big
    # leases, which fair share and backfill keep pushing back, are protected sooner (null: off)
    planner_wait_bound_gpu_hours: float | None = DEFAULT_WAIT_BOUND_GPU_HOURS
    # at most this many leases past the bound go before fair share at a time, per GPU model, those
    # that reached it first (null: every one)
    planner_wait_bound_leases: int | None = DEFAULT_WAIT_BOUND_LEASES
    # the ETA a lease is first told is kept against fair share: once a plan would start it later,
    # it goes by that ETA, and later leases fit around it (docs/performance.md, "Promise rules")
    planner_keep_etas: bool = DEFAULT_KEEP_ETAS
    # age x size: a waiting lease's fair-share score halves for every this many GPU-hours it has
    # waited (its GPUs times the hours), so that big leases are not starved (null: fair share alone)
    planner_age_size_gpu_hours: float | None = DEFAULT_AGE_SIZE_GPU_HOURS
    # the queued charge: this times the GPU-hours a project's holds keep from now and its waiting leases
    # ahead of a lease will use count in the lease's fair-share score, so that a flood cannot all go before
    # a big lease (at most 1000; null: fair share alone)
    planner_queued_charge: float | None = DEFAULT_QUEUED_CHARGE
    # ... except on leases of this many GPUs per VM or more, the big leases it makes room for (a gang of
    # small VMs is charged: it needs no host drained) (null: every lease)
    planner_queued_charge_spares_gpus: int | None = DEFAULT_QUEUED_CHARGE_SPARES_GPUS
    # a one-VM lease goes, among the hosts where it starts earliest, where its end leaves the fewest GPUs
    # free (the host's other leases outlast it), so that hosts empty whole for big leases; false: best fit
    planner_empty_together: bool = DEFAULT_EMPTY_TOGETHER
    # sharing rules (see README "Sharing rules")
    reclaim_after_seconds: int = 3600        # a lease within quota waits at most this for borrowed GPUs
    reclaim_notice_seconds: int = 900        # warning before a lease is reclaimed or preempted
    reclaim_min_runtime_seconds: int = 3600  # a borrowing lease runs at least this before it is reclaimed
    extension_window_seconds: int | None = None  # extend only in a lease's last part (None: any time)
    decision_hook_url: str | None = None     # POSTed before a lease is accepted, extended or ended
    decision_hook_timeout_seconds: float = 5.0
    decision_hook_default: str = "allow"     # when the hook times out or fails: allow or deny
    max_page_size: int = 1000
    # the Blazar-compatible API (/reservation/v1, README "Blazar clients"): a lease that cannot start at
    # its asked start is refused as Blazar refuses it (refuse), or accepted and shown PENDING until the
    # queue starts it (pending)
    blazar_when_queued: str = "refuse"
    # limits a tenant cannot pass (README: Security)
    max_lease_duration_days: int = 90        # the longest lease, whatever the project's quota says
    max_start_ahead_days: int = 365          # how far ahead a lease's start (or latest start) may be
    max_waiting_leases_per_project: int = 100  # leases waiting (requested or queued) at once, per project ...
    max_waiting_leases_per_user: int = 30      # ... and per user
    max_dry_runs_per_minute: int = 20          # a project's dry runs (each plans the whole queue), per API process
    # dashboard (/dashboard): the top bar's link back to Horizon (none when unset), the Keystone it logs in
    # to (default: keystone_authtoken's www_authenticate_uri), how long a login lasts, and Secure cookies
    # even when the request looks like plain http (behind a TLS-terminating proxy)
    dashboard_horizon_url: str | None = None
    dashboard_keystone_url: str | None = None
    dashboard_session_seconds: int = 8 * 3600
    dashboard_cookie_secure: bool = False
    # counter-offers (engine/offers.py): how long an offer may be taken, the GPU memory per model
    # that says which models stand in for which (a model with at least the asked one's memory;
    # none: no other model is offered), and the key offers are signed with (none: derived from
    # dashboard_token_keys, else one per process, which a single process serves with)
    offer_valid_seconds: int = 300
    gpu_memory_gb: dict | None = None
    offer_secret: str | None = None
    # secrets, proxies and exposure (README: Security)
    # Fernet keys sealing the dashboard's Keystone tokens in the database: the first seals, any opens
    # (rotate: put a new key first, drop the old one later); none: no Keystone logins to the dashboard
    dashboard_token_keys: list = field(default_factory=list)
    trusted_proxies: int = 0         # proxies in front whose X-Forwarded-For/-Proto are believed (0: none)
    metrics_public: bool = False     # /metrics open to all; off: the metrics:show rule (admins, scrape token)
    metrics_scrape_token: str | None = None  # "Authorization: Bearer <it>" reads /metrics
    allow_noauth2: bool = False      # wsgi.py (production) serves noauth2 only with this, set in the file

    # the driver's options dataclass (cloud/builtin.py, ...), from either spelling
    cloud_options: Any = field(init=False, repr=False, compare=False, default=None)
    # idle_rules, read
    idle_rule_set: tuple = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self):
        old = {name: getattr(self, name) for name in OLD_CLOUD_SPELLING if getattr(self, name) is not None}
        self.cloud_driver, self.cloud_options = registry.resolve(self.cloud, old)
        self.idle_rule_set = idle_rules(self.idle_rules)
        if not 0 < self.idle_utilization_percent <= 100 or not 1 <= self.idle_minutes <= 10080:
            raise ValueError("idle_utilization_percent must be in (0, 100] and idle_minutes from 1 to 10080")
        if isinstance(self.gpu_use_retention_days, bool) or not isinstance(self.gpu_use_retention_days, int) \
                or not 1 <= self.gpu_use_retention_days <= 36500:
            raise ValueError("gpu_use_retention_days must be a whole number of days from 1 to 36500")
        if not 0 <= self.park_grace_seconds <= 7 * 24 * 3600:
            raise ValueError("park_grace_seconds must be from 0 to 604800 (a week)")
        stop = self.engine_stop_seconds
        if isinstance(stop, bool) or not isinstance(stop, (int, float)) or not 0 < stop <= 600:
            raise ValueError("engine_stop_seconds must be a number of seconds > 0 and at most 600")

    @classmethod
    def load(cls, path: str | None = None, **overrides) -> "Config":
        values: dict = {}
        if path:
            read = yaml.safe_load(Path(path).read_text())
            if read is not None and not isinstance(read, dict):   # else dict.update's words, naming no option
                raise ValueError(f"the file holds a {type(read).__name__}, not the options: write one "
                                 "`name: value` per line, such as `database_url: sqlite:///gpu-tenancy.db`")
            values.update(read or {})
        known = {f.name: f for f in fields(cls)}
        for name, f in known.items():
            variable = "GPU_TENANCY_" + name.upper()
            env = os.environ.get(variable)
            try:   # a number that is not one names its variable, not only int()'s words
                if env is not None and f.type in ("str", "str | None"):
                    values[name] = env
                elif env is not None and f.type in ("int", "int | None"):
                    values[name] = int(env)
                elif env is not None and f.type in ("float", "float | None"):
                    values[name] = float(env)
                elif env is not None and f.type == "bool":
                    values[name] = env.lower() in ("1", "true", "yes")
            except ValueError:
                kind = "a whole number" if f.type.startswith("int") else "a number"
                raise ValueError(f"{variable}={env!r}: {name} must be {kind}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - set(known)
        if unknown:
            raise ValueError(f"unknown configuration options: {', '.join(sorted(unknown))}")
        if values.get("auth_strategy", "keystone") not in ("keystone", "noauth2"):
            raise ValueError("auth_strategy must be keystone or noauth2")
        if values.get("decision_hook_default", "allow") not in ("allow", "deny"):
            raise ValueError("decision_hook_default must be allow or deny")
        if values.get("blazar_when_queued", "refuse") not in BLAZAR_WHEN_QUEUED:
            raise ValueError("blazar_when_queued must be " + " or ".join(BLAZAR_WHEN_QUEUED))
        bound = values.get("planner_wait_bound_seconds")
        if bound is not None and (not isinstance(bound, int) or bound < 0):
            raise ValueError("planner_wait_bound_seconds must be a whole number of seconds >= 0, or null")
        gh = values.get("planner_wait_bound_gpu_hours")
        if gh is not None and (isinstance(gh, bool) or not isinstance(gh, (int, float)) or not gh >= 0
                               or gh == float("inf")):
            raise ValueError("planner_wait_bound_gpu_hours must be a number of GPU-hours >= 0, or null")
        most = values.get("planner_wait_bound_leases")
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
            raise ValueError("planner_wait_bound_leases must be a whole number >= 1, or null")
        for flag, default in (("planner_keep_etas", DEFAULT_KEEP_ETAS), ("planner_empty_together", DEFAULT_EMPTY_TOGETHER)):
            if not isinstance(values.get(flag, default), bool):
                raise ValueError(f"{flag} must be true or false")
        aged = values.get("planner_age_size_gpu_hours")
        if aged is not None and (isinstance(aged, bool) or not isinstance(aged, (int, float)) or not aged > 0
                                 or aged == float("inf")):
            raise ValueError("planner_age_size_gpu_hours must be a number of GPU-hours > 0, or null")
        charge = values.get("planner_queued_charge")
        # bounded: a charge times GPU-hours must stay finite (1e308 x 2 is inf), and a VM has no more GPUs
        if charge is not None and (isinstance(charge, bool) or not isinstance(charge, (int, float))
                                   or not 0 < charge <= 1000):
            raise ValueError("planner_queued_charge must be a number > 0 and at most 1000, or null")
        spares = values.get("planner_queued_charge_spares_gpus")
        if spares is not None and (isinstance(spares, bool) or not isinstance(spares, int) or not 1 <= spares <= 64):
            raise ValueError("planner_queued_charge_spares_gpus must be a whole number of GPUs from 1 to 64, or null")
        # a duration is stored in seconds as a 32-bit integer (PostgreSQL's): 10 years fit; and
        # both stay within the bound of engine/limits.py's guard (60 years)
        for name, ceiling in (("max_lease_duration_days", 3650), ("max_start_ahead_days", 18250),
                           ("max_waiting_leases_per_project", 10**6), ("max_waiting_leases_per_user", 10**6),
                           ("max_dry_runs_per_minute", 10**6)):
            limit = values.get(name, known[name].default)
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= ceiling:
                raise ValueError(f"{name} must be a whole number from 1 to {ceiling}")
        floor = values.get("release_allowance_seconds", 0)
        if isinstance(floor, bool) or not isinstance(floor, int) or not 0 <= floor <= 86400:
            raise ValueError("release_allowance_seconds must be a whole number of seconds from 0 to 86400")
        spacing = values.get("engine_wake_min_interval_seconds", 3.0)
        if isinstance(spacing, bool) or not isinstance(spacing, (int, float)) or not 0 <= spacing <= 600:
            raise ValueError("engine_wake_min_interval_seconds must be a number of seconds from 0 to 600")
        check_offers(values)
        check_webhook_workers(values)
        for net in values.get("webhook_allowed_networks") or []:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:   # a typo should not quietly allow nothing
                raise ValueError(f"webhook_allowed_networks: {exc}") from None
        check_usage_prices(values.get("usage_prices") or {})
        check_exposure(values)
        return cls(**values)


RULE_KEYS = {"project_id", "priority_class", "warn_after_minutes", "then", "then_after_minutes"}


def idle_rules(rules) -> tuple[IdleRule, ...]:
    """The idle_rules option as IdleRules; a ValueError names the rule that is wrong."""
    if not isinstance(rules, list):
        raise ValueError("idle_rules must be a list of rules")
    out: list[IdleRule] = []
    for n, rule in enumerate(rules):
        try:
            if not isinstance(rule, dict) or set(rule) - RULE_KEYS:
                raise ValueError(f"a rule is a mapping of {', '.join(sorted(RULE_KEYS))}")
            minutes = [rule.get("warn_after_minutes"), rule.get("then_after_minutes", 0)]
            if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10080 for v in minutes):
                raise ValueError("the minutes are whole numbers up to 10080 (a week)")
            then_after = rule.get("then_after_minutes")
            made = IdleRule(rule["warn_after_minutes"] * 60, rule.get("then", "none"),
                            then_after * 60 if then_after is not None else None,
                            rule.get("project_id"), rule.get("priority_class"))
        except ValueError as exc:
            raise ValueError(f"idle_rules[{n}]: {exc}") from None
        if any((r.project_id, r.priority_class) == (made.project_id, made.priority_class) for r in out):
            raise ValueError(f"idle_rules[{n}]: a second rule for the same project or priority class")
        out.append(made)
    return tuple(out)


WEBHOOK_TIMEOUT_MAX = 30.0   # seconds a tenant's hung receiver may hold a worker, per try


def check_webhook_workers(values: dict) -> None:
    """The outbox's bounds: without them a tenant's hung receiver holds a worker for as long as
    the deadline says, and a reserve of every worker (or none) lets a few projects hold them all."""
    known = {f.name: f.default for f in fields(Config)}
    timeout = values.get("webhook_timeout_seconds", known["webhook_timeout_seconds"])
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= WEBHOOK_TIMEOUT_MAX:
        raise ValueError(f"webhook_timeout_seconds must be a number of seconds > 0 and at most {WEBHOOK_TIMEOUT_MAX:g}")
    counts = {name: values.get(name, known[name])
              for name in ("webhook_workers", "webhook_workers_per_target", "webhook_workers_reserved")}
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < (0 if name.endswith("reserved") else 1):
            raise ValueError(f"{name} must be a whole number >= {0 if name.endswith('reserved') else 1}")
    if counts["webhook_workers_reserved"] >= counts["webhook_workers"]:
        raise ValueError("webhook_workers_reserved must be less than webhook_workers "
                         "(a failing receiver's notices need a worker too)")


def check_offers(values: dict) -> None:
    valid = values.get("offer_valid_seconds", 300)
    if isinstance(valid, bool) or not isinstance(valid, int) or not 10 <= valid <= 86400:
        raise ValueError("offer_valid_seconds must be a whole number of seconds from 10 to 86400")
    memory = values.get("gpu_memory_gb")
    if memory is not None and (not isinstance(memory, dict) or not all(
            isinstance(k, str) and not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0
            for k, v in memory.items())):
        raise ValueError("gpu_memory_gb must map each GPU model to its memory in GB (a number > 0)")
    secret = values.get("offer_secret")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise ValueError("offer_secret must be a string of at least 16 characters")


def check_usage_prices(prices) -> None:
    """{GPU model: price per GPU-hour}: a price is a number >= 0 (a typo must not rate usage at nothing)."""
    if not isinstance(prices, dict):
        raise ValueError("usage_prices must be a mapping of GPU model to price per GPU-hour")
    for model, price in prices.items():
        if (not isinstance(model, str) or isinstance(price, bool) or not isinstance(price, (int, float))
                or not 0 <= price < float("inf")):
            raise ValueError(f"usage_prices[{model!r}] must be a price per GPU-hour >= 0")


def check_exposure(values: dict) -> None:
    """The checks of the "secrets, proxies and exposure" options."""
    keys = values.get("dashboard_token_keys") or []
    if not isinstance(keys, list):
        raise ValueError("dashboard_token_keys must be a list of Fernet keys")
    for n, key in enumerate(keys):
        try:
            Fernet(key)
        except (ValueError, TypeError):   # the key itself stays out of the message (and the logs)
            raise ValueError(f"dashboard_token_keys[{n}] is not a Fernet key (32 url-safe base64 bytes)") from None
    proxies = values.get("trusted_proxies", 0)
    if isinstance(proxies, bool) or not isinstance(proxies, int) or not 0 <= proxies <= 10:
        raise ValueError("trusted_proxies must be a whole number of proxies from 0 to 10")
    scrape = values.get("metrics_scrape_token")
    if scrape is not None and (not isinstance(scrape, str) or len(scrape) < 16):
        raise ValueError("metrics_scrape_token must be a string of at least 16 characters")
    if "GPU_TENANCY_ALLOW_NOAUTH2" in os.environ:   # one variable must not open the service to anyone
        raise ValueError("allow_noauth2 is read from the config file only, not from the environment")

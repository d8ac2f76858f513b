"""RBAC with oslo.policy: project-scoped reader, member and admin personas.
Each action has one rule here; operators override them in a policy file."""
from __future__ import annotations

from typing import Any

from oslo_config import cfg
from oslo_policy import policy

ADMIN = "role:admin"
READER = "role:reader and project_id:%(project_id)s"
MEMBER = "role:member and project_id:%(project_id)s"
ANY_READER = "role:reader or role:admin"

# The Blazar-compatible API (api/blazar/) acts on the same leases under the same lease:* rules:
# one lease, one rule, whichever API it is asked through.
RULES = [
    policy.RuleDefault("admin", ADMIN, "Cloud admin."),
    policy.RuleDefault("lease:create", MEMBER, "Ask for a lease in one's project."),
    policy.RuleDefault("lease:list", f"{READER} or {ADMIN}", "List a project's leases."),
    policy.RuleDefault("lease:list:all_projects", ADMIN, "List leases of every project."),
    policy.RuleDefault("lease:show", f"{READER} or {ADMIN}", "Show a lease and its events."),
    policy.RuleDefault("lease:update", f"{MEMBER} or {ADMIN}", "Extend or shorten a lease."),
    policy.RuleDefault("lease:delete", f"{MEMBER} or {ADMIN}", "Cancel or end a lease."),
    policy.RuleDefault("lease:resume", f"{MEMBER} or {ADMIN}", "Resume a lease an idle rule parked."),
    policy.RuleDefault("lease:readiness:report", "lease_token_sha256:%(lease_token_sha256)s",
                       "A lease's VM reports its GPU readiness, with the lease's secret (X-Lease-Token)."),
    policy.RuleDefault("lease:utilization:report", "lease_token_sha256:%(lease_token_sha256)s",
                       "A lease's VM reports its GPUs' utilisation, with the lease's secret (X-Lease-Token)."),
    policy.RuleDefault("lease:done", f"lease_token_sha256:%(lease_token_sha256)s or {MEMBER} or {ADMIN}",
                       "End a running lease because its work is done: from its VM with the lease's secret "
                       "(gpu-done), or by a member."),
    policy.RuleDefault("shape:list", ANY_READER, "List the shapes on offer."),
    policy.RuleDefault("shape:manage", ADMIN, "Create and retire shapes."),
    policy.RuleDefault("image:list", ANY_READER, "List the standard images."),
    policy.RuleDefault("image:manage", ADMIN, "Add and retire standard images."),
    policy.RuleDefault("quota:show", f"{READER} or {ADMIN}", "Show a project's quotas."),
    policy.RuleDefault("quota:update", ADMIN, "Set a project's quotas."),
    policy.RuleDefault("capacity:show", ANY_READER, "GPUs per model now, and the calendar."),
    policy.RuleDefault("queue:show", ANY_READER, "Everyone's waiting leases in planned order (others' unnamed)."),
    policy.RuleDefault("queue:show:all_projects", ADMIN, "Everyone's waiting leases with their projects and names."),
    policy.RuleDefault("share:show", ANY_READER, "Fair-share standing per project and GPU model (others' unnamed)."),
    policy.RuleDefault("share:show:all_projects", ADMIN, "Fair-share standing with every project's name."),
    policy.RuleDefault("usage:show", f"{READER} or {ADMIN}", "GPU-hours of a project."),
    policy.RuleDefault("volume:list", f"{READER} or {ADMIN}", "A project's volumes, as the cloud has them."),
    policy.RuleDefault("usage:show:all_projects", ADMIN, "GPU-hours of every project."),
    policy.RuleDefault("priority_class:list", ANY_READER, "List the priority classes."),
    policy.RuleDefault("priority_class:manage", ADMIN, "Create, change and remove priority classes."),
    policy.RuleDefault("budget:show", f"{READER} or {ADMIN}", "A project's GPU-hour budgets and their use."),
    policy.RuleDefault("budget:show:all_projects", ADMIN, "Budgets of every project."),
    policy.RuleDefault("budget:manage", ADMIN, "Set and remove GPU-hour budgets."),
    policy.RuleDefault("host:list", ADMIN, "The GPU hosts, their state and GPUs in use."),
    policy.RuleDefault("host:update", ADMIN, "Drain a GPU host (no new leases) or undrain it."),
    policy.RuleDefault("audit:list", ADMIN, "The audit record of changes made through the API."),
    policy.RuleDefault("webhook:show", f"{READER} or {ADMIN}", "Show where a project's lease notices go."),
    policy.RuleDefault("webhook:update", f"{MEMBER} or {ADMIN}", "Set or remove a project's webhook."),
    policy.RuleDefault("whatif:run", ADMIN, "Replay the lease history under proposed settings (policy what-if)."),
    policy.RuleDefault("whatif:show", ADMIN, "A policy what-if's progress and figures."),
    # metrics_scrape_token: set when the request carries the config's scrape token (api/metrics.py)
    policy.RuleDefault("metrics:show", f"{ADMIN} or metrics_scrape_token:valid",
                       "Prometheus metrics (every project's GPU use), unless metrics_public is on."),
]


class Enforcer(policy.Enforcer):
    """oslo.policy's, looking for its files (the policy file, policy.d) in the configuration
    directories once per process rather than on every check: with none there, each check
    searched them all again (2-3 ms of a create's three checks). A file found is still
    re-read when it changes; one added later takes a restart."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._paths: dict[str, str | None] = {}
        super().__init__(*args, **kwargs)

    def _get_policy_path(self, path: str) -> str:
        if path not in self._paths:
            try:
                self._paths[path] = super()._get_policy_path(path)
            except cfg.ConfigFilesNotFoundError:
                self._paths[path] = None
        found = self._paths[path]
        if found is None:
            raise cfg.ConfigFilesNotFoundError([path])
        return found


def make_enforcer(policy_file: str | None) -> policy.Enforcer:
    conf = cfg.ConfigOpts()
    conf([], project="gpu_tenancy", default_config_files=[])
    enforcer = Enforcer(conf, policy_file=policy_file)
    enforcer.register_defaults(RULES)
    return enforcer

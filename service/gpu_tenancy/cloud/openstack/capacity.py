"""Hosts and their GPUs, read the way Nova and Placement keep them.

Placement knows the inventory: each passthrough GPU is a child resource
provider under its compute node, with one unit of a GPU resource class
(CUSTOM_PGPU_A100, ...). Placement knows nothing of service state, so
whether a host is up or disabled comes from Nova's hypervisor list, which
carries the nova-compute service's status and state.
"""
from __future__ import annotations

import logging
from collections import Counter, defaultdict

from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import HostInfo

log = logging.getLogger(__name__)
GPU_CLASS_PREFIX = "CUSTOM_PGPU_"


class GpuInventory:
    """Reads hosts from Placement and Nova. A GPU provider's inventory is read again only
    when its generation moved (Placement bumps it on every change of the provider's
    inventory, and of its allocations): an operator's `reserved` on a faulty GPU (Nova leaves
    it alone), or the inventory nova-compute writes just after it made the provider, is seen
    at the next refresh, while one of an unchanged provider costs nothing: three list calls
    however big the cloud, and one more per provider changed since."""

    def __init__(self, resource_classes: dict[str, str]):
        self.resource_classes = resource_classes   # CUSTOM_PGPU_A100 -> A100
        # provider id -> (its generation when read, model, units)
        self._inventory: dict[str, tuple[int | None, str | None, int]] = {}

    def model_of(self, resource_class: str) -> str | None:
        """The GPU model of a resource class: from the configured map, else by the
        CUSTOM_PGPU_<MODEL> convention."""
        if self.resource_classes:
            return self.resource_classes.get(resource_class)
        if resource_class.startswith(GPU_CLASS_PREFIX):
            return resource_class[len(GPU_CLASS_PREFIX):]
        return None

    def hosts(self, conn) -> list[HostInfo]:
        providers = list(conn.placement.resource_providers())
        names = {rp.id: rp.name for rp in providers}
        gpus: dict[str, Counter] = defaultdict(Counter)    # node name -> model -> GPUs
        for rp in providers:
            if not rp.parent_provider_id:
                continue
            model, units = self._gpu_inventory(conn, rp.id, getattr(rp, "generation", None))
            if model:
                gpus[names.get(rp.root_provider_id, rp.root_provider_id)][model] += units
        nodes = {h["hypervisor_hostname"]: h for h in hypervisors(conn)}
        aggregates: dict[str, str] = {}
        for agg in conn.compute.aggregates():
            for host in agg.hosts or []:
                aggregates.setdefault(host, agg.name)
        hosts = []
        for node, models in sorted(gpus.items()):
            model, count = models.most_common(1)[0]
            if len(models) > 1:
                log.warning("host %s has GPUs of several models %s; only %s are offered", node, dict(models), model)
            hyp = nodes.get(node) or {}
            name = (hyp.get("service") or {}).get("host") or node   # Nova pins servers to the service host
            hosts.append(HostInfo(name=name, gpu_model=model, gpus=count,
                                  enabled=hyp.get("status") == "enabled", up=hyp.get("state") == "up",
                                  aggregate=aggregates.get(name)))
        return hosts

    def _gpu_inventory(self, conn, provider_id: str, generation: int | None) -> tuple[str | None, int]:
        known = self._inventory.get(provider_id)
        if known is None or generation is None or known[0] != generation:
            found: tuple[str | None, int] = (None, 0)
            for inv in conn.placement.resource_provider_inventories(provider_id):
                model = self.model_of(inv.resource_class)
                if model:
                    found = (model, max(0, int(inv.total) - int(inv.reserved or 0)))
            known = (generation, *found)
            self._inventory[provider_id] = known
        return known[1], known[2]


# 2.53 gives each hypervisor its service host, state and status. From 2.88 the
# detailed list also asks every compute for its uptime over RPC, and one down
# host then turns the whole list into a 500 (MessagingTimeout): so not 2.88.
HYPERVISOR_MICROVERSION = "2.53"


def hypervisors(conn) -> list[dict]:
    """Every hypervisor with its service, following Nova's pages."""
    found: list[dict] = []
    url: str | None = "/os-hypervisors/detail"
    while url:
        response = conn.compute.get(url, microversion=HYPERVISOR_MICROVERSION)
        sdk.raise_from_response(response)
        body = response.json()
        found += body.get("hypervisors", [])
        url = next((link["href"] for link in body.get("hypervisors_links", []) if link.get("rel") == "next"), None)
    return found

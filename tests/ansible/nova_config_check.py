"""Run by the Python that has nova installed: load config files with nova's own
options and parsers, and print what nova makes of them as JSON.

    python nova_config_check.py PROVIDER_CONFIG_DIR FILE...
"""
import json
import sys

import nova.conf
from nova.compute import provider_config
from nova.pci import request as pci_request
from nova.pci import whitelist

provider_dir, files = sys.argv[1], sys.argv[2:]
CONF = nova.conf.CONF
CONF([f"--config-file={f}" for f in files], project="nova", default_config_files=[])
specs = whitelist.Whitelist(CONF.pci.device_spec)  # raises on a spec nova refuses
aliases = pci_request.get_alias_from_config()      # raises on an alias nova refuses
providers = provider_config.get_provider_configs(provider_dir)
print(json.dumps({
    "report_in_placement": CONF.pci.report_in_placement,
    "pci_in_placement": CONF.filter_scheduler.pci_in_placement,
    "enabled_filters": list(CONF.filter_scheduler.enabled_filters),
    "isolated_aggregates": CONF.scheduler.enable_isolated_aggregate_filtering,
    "provider_config_location": CONF.compute.provider_config_location,
    "device_specs": [{"vendor_id": s.vendor_id, "product_id": s.product_id, "tags": s.tags} for s in specs.specs],
    "aliases": {name: [dict(spec) for spec in value[1]] for name, value in aliases.items()},
    "provider_traits": {uuid: sorted(p["traits"]["additional"]) for uuid, p in providers.items()},
}, default=str))

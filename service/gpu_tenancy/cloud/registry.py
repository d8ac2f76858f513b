"""Cloud drivers by name: each registers a factory and the dataclass of its options.

The configuration names a driver and gives its options in its own block
(`cloud: {driver: openstack, options: {...}}`); `Config.load` checks the name
against this registry and the options against the driver's dataclass, and the
service builds the driver with `make_cloud(config, clock)`.

The two drivers of this package are in `cloud/builtin.py`. A driver
from another distribution registers through the `gpu_tenancy.cloud_drivers`
entry point group: each entry point names a `Driver`.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "gpu_tenancy.cloud_drivers"


@dataclass(frozen=True)
class Driver:
    """A cloud driver as the configuration knows it.

    `options` is a dataclass: every field an option of the block, checked in its
    `__post_init__` (raise ValueError in the words of the configuration). `factory`
    makes the driver from those options and the service's clock, importing the
    driver's own libraries only then. `old_spelling` maps the flat `Config` fields
    that used to carry these options to the option each one now fills."""
    name: str
    options: type
    factory: Callable[[Any, Any], Any]
    old_spelling: dict[str, str] = field(default_factory=dict)


_drivers: dict[str, Driver] = {}
_loaded = False
_lock = threading.Lock()


def register(driver: Driver) -> Driver:
    if not dataclasses.is_dataclass(driver.options):
        raise TypeError(f"cloud driver {driver.name}: options must be a dataclass")
    known = {f.name for f in dataclasses.fields(driver.options)}
    if set(driver.old_spelling.values()) - known:
        raise TypeError(f"cloud driver {driver.name}: old_spelling names options it does not have")
    with _lock:
        if driver.name in _drivers and _drivers[driver.name] != driver:
            raise ValueError(f"cloud driver {driver.name} is registered twice")
        _drivers[driver.name] = driver
    return driver


def _load() -> None:
    """The built-in drivers, then those of other distributions (once per process)."""
    global _loaded
    if _loaded:
        return
    from gpu_tenancy.cloud.builtin import DRIVERS
    for driver in DRIVERS:
        register(driver)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            driver = point.load()
        except Exception:   # one broken plugin must not stop the service; naming it fails clearly
            log.exception("cloud driver entry point %s could not be loaded", point.name)
            continue
        if not isinstance(driver, Driver) or driver.name != point.name:
            log.error("cloud driver entry point %s does not name a Driver called %s", point.name, point.name)
            continue
        register(driver)
    _loaded = True


def names() -> list[str]:
    _load()
    return sorted(_drivers)


def get(name: str) -> Driver:
    _load()
    driver = _drivers.get(name) if isinstance(name, str) else None
    if driver is None:
        raise ValueError(f"cloud driver {name!r} is not registered: the drivers are {', '.join(sorted(_drivers))}")
    return driver


def options(name: str, given: dict) -> Any:
    """The driver's options dataclass from a mapping; unknown keys and bad values are errors."""
    driver = get(name)
    if not isinstance(given, dict):
        raise ValueError(f"cloud.options must be a mapping of the {name} driver's options")
    known = [f.name for f in dataclasses.fields(driver.options) if f.init]
    unknown = set(given) - set(known)
    if unknown:
        raise ValueError(f"unknown options of the {name} cloud driver: {', '.join(sorted(map(str, unknown)))} "
                         f"(it has: {', '.join(known)})")
    return driver.options(**given)


def resolve(block: dict, old: dict) -> tuple[str, Any]:
    """(driver name, its options) from the `cloud` block, or else from the old flat spelling:
    `old` holds the flat settings given (`cloud_driver` and the fields in the drivers'
    `old_spelling`). One spelling at a time: both at once would leave one of them unread."""
    if block:
        if not isinstance(block, dict) or set(block) - {"driver", "options"} or "driver" not in block:
            raise ValueError("cloud must be a mapping {driver: <name>, options: {...}}")
        name = block["driver"]
        flat = sorted(k for k in old if k != "cloud_driver" or old[k] != name)
        if flat:
            raise ValueError(f"{', '.join(flat)}: the old spelling of the cloud block's settings; "
                             "give them in cloud (driver, options) alone")
        return name, options(name, block.get("options") or {})
    name = old.get("cloud_driver", "simulated")
    driver = get(name)
    return name, options(name, {option: old[flat] for flat, option in driver.old_spelling.items() if flat in old})


def make_cloud(config, clock):
    """The configured driver, made with its options and the service's clock."""
    return get(config.cloud_driver).factory(config.cloud_options, clock)

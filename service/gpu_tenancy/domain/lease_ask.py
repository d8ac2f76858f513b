"""What a tenant asks of the service about a lease, as typed commands: `LeaseAsk` (a new
lease: POST /v1/leases, also with ?dry_run) and `EndChange` (a new end: PATCH).

The API builds them right after the request body passes its schema
(api/lease_commands.py), with every time and duration already read into epoch seconds;
the engine takes them and never reads the JSON. A field of LeaseAsk is a property of the
create schema and back (tests/unit/test_lease_ask.py), so a new lease field cannot be
added to one and forgotten in the other.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Boot(StrEnum):
    SERVICE = "service"   # the service boots the VMs with a standard image
    TENANT = "tenant"     # the project's members boot servers with the lease's flavor


@dataclass(frozen=True)
class VolumeAsk:
    """The lease's data volume: a new one of `size_gb`, or the project's volume `id`."""
    size_gb: int | None = None
    id: str | None = None


@dataclass(frozen=True)
class LeaseAsk:
    shape: str
    duration: int                       # seconds, positive
    name: str | None = None             # None: the service names it lease-<id>
    instances: int = 1
    start: int | None = None            # epoch seconds; None: now
    latest_start: int | None = None     # epoch seconds; None: no deadline
    image: str | None = None            # None: the catalog's default
    volume: VolumeAsk | None = None
    key_name: str | None = None
    user_data: str | None = None
    priority: int | None = None         # None: 0, or the class's
    priority_class: str | None = None
    readiness_probe: bool = False
    boot: Boot = Boot.SERVICE
    network: str | None = None          # id or name; None: the service chooses
    floating_ip: bool = False
    accept_offer: str | None = None     # an offer's id (engine/offers.py): it replaces shape, VMs, duration, start

    def service_boot_fields_given(self) -> list[str]:
        """The fields given that only the service's own boots use (a lease the tenant
        boots has none of them), in the schema's order."""
        return [name for name in SERVICE_BOOT_ONLY if getattr(self, name) not in (None, False)]


# what the service's own boots use; a lease the tenant boots has none of it
SERVICE_BOOT_ONLY = ("image", "volume", "key_name", "user_data", "readiness_probe", "network", "floating_ip")


@dataclass(frozen=True)
class EndChange:
    """A new end for a lease: an end time or a new duration (exactly one is given)."""
    end: int | None = None              # epoch seconds
    duration: int | None = None         # seconds, positive
    shrink: bool = False                # the change may shorten the lease

    def __post_init__(self) -> None:
        if (self.end is None) == (self.duration is None):
            raise ValueError("an EndChange has an end or a duration, not both or neither")

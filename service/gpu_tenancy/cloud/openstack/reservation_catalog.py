"""The Blazar-compatible API in the Keystone catalog, when the operator asks
(`gpu-tenancy reservation-endpoint register|unregister`): a service of type
`reservation` whose endpoints are the service's /reservation/v1 URL, so that
python-blazarclient, Heat's OS::Blazar::Lease and python-chi find it as they find
Blazar. One region has one `reservation` service: registering next to a real
Blazar is refused, not mixed. Both calls are idempotent."""
from __future__ import annotations

from dataclasses import dataclass

SERVICE_NAME = "gpu-tenancy-reservation"
SERVICE_TYPE = "reservation"
INTERFACES = ("public", "internal", "admin")


class CatalogConflict(Exception):
    pass


@dataclass(frozen=True)
class Registered:
    service_id: str
    region: str
    endpoints: dict[str, str]      # interface: url


def register(conn, url: str, region: str, interfaces=INTERFACES) -> Registered:
    """Our service of type reservation, with an endpoint at `url` for each interface in
    `region` (made if missing, moved if at another URL)."""
    idn = conn.identity
    if idn.find_region(region) is None:
        idn.create_region(id=region, description="made by gpu-tenancy reservation-endpoint register")
    ours = next(iter(idn.services(name=SERVICE_NAME)), None)
    for other in idn.services(type=SERVICE_TYPE):
        if other.name != SERVICE_NAME and any(ep.region_id == region for ep in idn.endpoints(service_id=other.id)):
            raise CatalogConflict(f"region {region} already has a reservation service ({other.name}, "
                                  f"{other.id}): a real Blazar? Register in another region, or remove it first")
    if ours is None:
        ours = idn.create_service(name=SERVICE_NAME, type=SERVICE_TYPE, is_enabled=True,
                                  description="gpu-tenancy's Blazar-compatible API")
    have = {ep.interface: ep for ep in idn.endpoints(service_id=ours.id, region_id=region)}
    for interface in interfaces:
        endpoint = have.get(interface)
        if endpoint is None:
            idn.create_endpoint(service_id=ours.id, interface=interface, url=url, region_id=region)
        elif endpoint.url != url:
            idn.update_endpoint(endpoint, url=url)
    return Registered(ours.id, region, {i: url for i in interfaces})


def unregister(conn, region: str) -> int:
    """Remove our endpoints in `region`, and our service once it has none; the number removed."""
    idn = conn.identity
    ours = next(iter(idn.services(name=SERVICE_NAME)), None)
    if ours is None:
        return 0
    removed = 0
    for endpoint in list(idn.endpoints(service_id=ours.id, region_id=region)):
        idn.delete_endpoint(endpoint, ignore_missing=True)
        removed += 1
    if not list(idn.endpoints(service_id=ours.id)):
        idn.delete_service(ours, ignore_missing=True)
    return removed

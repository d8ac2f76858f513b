"""A lease's network: chosen when the lease is asked for, made usable before its VMs
boot, floating IPs once they are ACTIVE, released after they are deleted.

Which network (`choose`, at request time, outside any transaction):
1. the request's `network` (id or name), if the project can use it (its own or shared);
2. else the project's only network;
3. else the operator's `default_network`, if the project can use it;
4. else, when the project has none, the cloud's auto-allocated topology (if it has it);
5. else 400, listing the networks to choose from.
Another project's private network is refused then (400), as is `floating_ip` on a cloud
with no external network: nothing is made. A cloud without tenant networks
(`CloudDriver.tenant_networks()` False) boots as it always did.

The engine's side (hooks in engine/lifecycle.py): `boot_fields` and `before_boot` (the
project's security group, the login user), `on_active` (addresses, floating IPs),
`release` (at the end, after the servers' delete) and `reconcile` (floating IPs of
finished or unknown leases, left by a crash). Floating IPs are described with the lease
in the cloud, so every step is idempotent and found again after a crash.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass


from gpu_tenancy.cloud.driver import CloudDriver, CloudError, NetworkInfo
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.failures import FailureClass, cloud_said
from gpu_tenancy.engine.crashpoints import crash_point
from gpu_tenancy.engine.leases import finished_or_unknown
from gpu_tenancy.errors import BadRequest, ServiceUnavailable

log = logging.getLogger(__name__)
REQUEST_TIMEOUT = 10.0   # seconds a request waits for the cloud's list of networks
ADDRESS_GRACE = 60       # seconds an ACTIVE VM may show no address yet before the lease goes on without
REQUEST, ONLY, DEFAULT, AUTO = "request", "only", "default", "auto"


@dataclass(frozen=True)
class Choice:
    via: str | None = None            # REQUEST, ONLY, DEFAULT, AUTO; None: the cloud has no tenant networks
    network_id: str | None = None     # None when auto-allocated
    network_name: str | None = None
    floating_ip: bool = False

    def render(self) -> dict | None:
        """As the API shows a lease's network (a preview's too, which has no lease row)."""
        if self.via is None:
            return None
        return {"id": self.network_id, "name": self.network_name, "chosen_by": self.via}

    def apply(self, row: m.Lease) -> None:
        """Onto the new lease, in the transaction that makes it."""
        row.network_via, row.network_id, row.network_name = self.via, self.network_id, self.network_name
        row.floating_ip = self.floating_ip


# --- at request time ------------------------------------------------------------------------
def choose(cloud: CloudDriver, project_id: str, wanted: str | None, floating: bool, operator: bool) -> Choice:
    """`wanted`: the network the lease asks for, if any; `floating`: whether it asks for floating IPs."""
    if not cloud.tenant_networks():
        if wanted is not None or floating:
            raise BadRequest("this cloud gives VMs no tenant networks: ask without network and floating_ip",
                             "gpu_tenancy.no_networks")
        return Choice()
    networks = bounded(lambda: cloud.project_networks(project_id), "list the project's networks", operator)
    usable = [n for n in networks if n.project_id == project_id or n.shared]
    if floating and not any(n.external for n in networks):
        raise BadRequest("floating_ip: this cloud has no external network to take floating IPs from",
                         "gpu_tenancy.no_external_network")
    if wanted is not None:
        return Choice(REQUEST, *_named(wanted, usable, networks, project_id), floating)
    if len(usable) == 1:
        return Choice(ONLY, usable[0].id, usable[0].name, floating)
    default = cloud.network_policy.default_network
    found = [n for n in usable if default in (n.id, n.name)] if default else []
    if len(found) == 1:
        return Choice(DEFAULT, found[0].id, found[0].name, floating)
    if default:
        log.warning("default_network %s is not a network project %s can use", default, project_id)
    if not usable and cloud.auto_allocation():
        return Choice(AUTO, None, None, floating)
    raise BadRequest(f"choose the lease's network: project {project_id} "
                     + (f"can use {len(usable)} networks: {listing(usable)}" if usable
                        else "has no network, and this cloud makes none for it; ask an admin for one"),
                     "gpu_tenancy.network_required")


def _named(wanted: str, usable: list[NetworkInfo], seen: list[NetworkInfo], project_id: str) -> tuple[str, str]:
    by_id = [n for n in usable if n.id == wanted]
    found = by_id or [n for n in usable if n.name == wanted]
    if len(found) == 1:
        return found[0].id, found[0].name
    if found:
        raise BadRequest(f"network: more than one network is named {wanted!r}; give its id: {listing(found)}",
                         "gpu_tenancy.ambiguous_network")
    external = [n for n in seen if wanted in (n.id, n.name) and n.external]
    if external:
        raise BadRequest(f"network: {wanted!r} is an external network, for floating IPs: boot on one of "
                         f"{listing(usable) or 'none'} and ask floating_ip: true", "gpu_tenancy.unknown_network")
    # another project's private network looks the same as none: it is not this project's to see
    raise BadRequest(f"network: {wanted!r} is not a network project {project_id} can use; it can use: "
                     f"{listing(usable) or 'none'}", "gpu_tenancy.unknown_network")


def listing(networks: list[NetworkInfo]) -> str:
    return ", ".join(f"{n.name} ({n.id}{', shared' if n.shared else ''})" for n in networks)


def bounded(call, what: str, operator: bool, timeout: float | None = None):
    """The cloud call's answer, or 503 if it fails or takes longer than `timeout` (a request
    is not held up by a slow cloud; the call may finish unseen in its thread)."""
    result: dict = {}

    def run():
        try:
            result["value"] = call()
        except Exception as exc:   # handed to the request's thread
            result["error"] = exc
    worker = threading.Thread(target=run, name="cloud-request-call", daemon=True)
    worker.start()
    worker.join(REQUEST_TIMEOUT if timeout is None else timeout)
    if worker.is_alive():
        raise ServiceUnavailable(f"the cloud did not {what} within {REQUEST_TIMEOUT if timeout is None else timeout:g}"
                                 " s; try again")
    error = result.get("error")
    if isinstance(error, CloudError):
        said = cloud_said(error.cloud_message if operator else None)
        raise ServiceUnavailable(f"the cloud did not {what}: {error.message}{said}; try again") from None
    if error is not None:
        raise error
    return result["value"]


# --- the engine's hooks ------------------------------------------------------------------------
def boot_fields(row: m.Lease) -> dict:
    """What BootRequest gets of the lease's network (read in the engine's transaction)."""
    if row.network_via is None:
        return {}
    return {"network_id": "auto" if row.network_via == AUTO else row.network_id}


def before_boot(lifecycle, lease_id: str, project_id: str, extra: dict, image_ref: str) -> None:
    """The project's security group (made once) into the boot, and who logs in."""
    if "network_id" not in extra:
        return
    cloud = lifecycle.cloud
    extra["security_group"] = cloud.ensure_security_group(project_id)
    user = cloud.image_login_user(image_ref) or cloud.network_policy.ssh_user
    with session_scope(lifecycle.sessions) as session:
        session.get_one(m.Lease, lease_id).ssh_user = user


def on_active(lifecycle, lease_id: str, states: dict, waited: int) -> bool:
    """Every VM is ACTIVE: keep their addresses, and make floating IPs when asked. False
    while a VM shows no address yet (the cloud writes it shortly): the engine looks again,
    up to ADDRESS_GRACE seconds (`waited`: since they were all first seen ACTIVE). A VM with
    no address then, of a lease that asked for a floating IP, is a network failure: the lease
    is not made active without the address it asked for."""
    with session_scope(lifecycle.sessions) as session:
        row = session.get_one(m.Lease, lease_id)
        if row.network_via is None:
            return True
        project, floating = row.project_id, row.floating_ip
        known = {s.vm_index: s.addresses for s in row.servers}
    if any(not s.addresses for s in states.values()) and waited <= ADDRESS_GRACE:
        return False
    bare = [vm_index for vm_index, s in sorted(states.items()) if not s.addresses]
    if floating and bare:
        raise CloudError(FailureClass.NETWORK, f"VM {bare[0]} has no address {ADDRESS_GRACE} s after it became "
                         "active: no floating IP can be given to it")
    for vm_index, state in sorted(states.items()):
        addresses = [dataclasses.asdict(a) for a in state.addresses]
        if floating and addresses:
            ip = lifecycle.cloud.ensure_floating_ip(lease_id, project, state.id)
            crash_point("floating_ip_made")
            if not any(a["ip"] == ip for a in addresses):   # the cloud shows it a little later
                addresses.append({"network": addresses[0]["network"], "ip": ip, "kind": "floating"})
        if addresses != known.get(vm_index):
            lifecycle.set_server(lease_id, vm_index, addresses=addresses)
            lifecycle._note(lease_id, "progress", f"VM {vm_index}: " + ", ".join(
                f"{a['kind']} {a['ip']} on {a['network']}" for a in addresses))
    return True


def release(lifecycle, lease_id: str) -> bool:
    """After the servers' delete: release the lease's floating IPs. False if the cloud
    failed (the next pass tries again)."""
    with session_scope(lifecycle.sessions) as session:
        if not session.get_one(m.Lease, lease_id).floating_ip:
            return True
    try:
        lifecycle.cloud.release_floating_ips(lease_id)
    except CloudError as exc:
        log.warning("releasing the floating IPs of lease %s: %s", lease_id, exc)
        return False
    crash_point("floating_ips_released")
    return True


def reconcile(lifecycle) -> None:
    """Release floating IPs whose lease is over or unknown (a crash between a lease's end
    and their release)."""
    try:
        leases = lifecycle.cloud.floating_ip_leases()
    except CloudError as exc:
        log.warning("reconcile: listing floating IPs failed: %s", exc)
        return
    with session_scope(lifecycle.sessions) as session:
        over = finished_or_unknown(session, leases)
    for lease_id in sorted(over):
        log.info("reconcile: releasing the floating IPs of finished lease %s", lease_id)
        try:
            lifecycle.cloud.release_floating_ips(lease_id)
        except CloudError as exc:
            log.warning("reconcile: releasing the floating IPs of lease %s failed: %s", lease_id, exc)


# --- what the lease shows ---------------------------------------------------------------------
def render_network(row) -> dict | None:
    return Choice(row.network_via, row.network_id, row.network_name).render()


def ssh_line(ssh_user: str | None, addresses: list | None) -> str | None:
    """`ssh <user>@<floating IP, else fixed IP>`, ready to copy."""
    if not addresses or not ssh_user:
        return None
    best = next((a for a in addresses if a["kind"] == "floating"), addresses[0])
    return f"ssh {ssh_user}@{best['ip']}"

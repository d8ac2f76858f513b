"""Where a project's webhook may point. Tenants choose the URL and the engine
POSTs from inside the cloud's control plane, so without a check a tenant could
make it call the metadata service (169.254.169.254), an API on 127.0.0.1 or any
host of the management network. Loopback, link-local, private, multicast and
reserved addresses are refused unless the operator lists their network in
`webhook_allowed_networks`. A literal address is checked when the webhook is set;
a host name when a notice is sent, on every address it resolves to then (names
can change, and DNS may not resolve where the API runs)."""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


class TargetRefused(ValueError):
    """The URL points where the service does not send notices."""


def check(url: str, allowed_networks: list[str], resolve: bool = False) -> None:
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:   # e.g. an unbalanced "[" or "]"
        raise TargetRefused(f"{url[:100]} is not a URL: {exc}") from None
    if not host:
        raise TargetRefused(f"{url} names no host")
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if host.lower().rstrip(".") == "localhost" or host.lower().rstrip(".").endswith(".localhost"):
            addresses = [ipaddress.ip_address("127.0.0.1")]
        elif not resolve:
            return
        else:
            addresses = resolved(host)
    for address in addresses:
        why = refusal(address, allowed_networks)
        if why:
            shown = host if str(address) == host else f"{host} ({address})"
            raise TargetRefused(f"{shown} is {why}; the service sends no notices there unless an operator "
                                "lists its network in webhook_allowed_networks")


def resolved(host: str) -> list:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise TargetRefused(f"{host} does not resolve: {exc.strerror}") from None
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def refusal(address, allowed_networks: list[str]) -> str | None:
    """Why the service does not POST to `address`, or None."""
    if address.version == 6 and address.ipv4_mapped:   # ::ffff:127.0.0.1 is 127.0.0.1
        address = address.ipv4_mapped
    if any(address in ipaddress.ip_network(net, strict=False) for net in allowed_networks):
        return None
    for kind in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return f"a {kind.replace('_', '-')} address"
    if not address.is_global:
        return "not a global address"
    return None


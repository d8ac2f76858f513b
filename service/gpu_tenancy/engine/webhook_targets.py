"""Where a project's webhook may point. Tenants choose the URL and the engine
POSTs from inside the cloud's control plane, so without a check a tenant could
make it call the metadata service (169.254.169.254), an API on 127.0.0.1 or any
host of the management network. Loopback, link-local, private, multicast and
reserved addresses are refused unless the operator lists their network in
`webhook_allowed_networks`. A literal address is checked when the webhook is set;
a host name when a notice is sent, on every address it resolves to then (names
can change, and DNS may not resolve where the API runs), and the notice goes to
an address so checked (`pin`): a second lookup at connect time could answer
otherwise (DNS rebinding). IPv6 forms that carry an IPv4 address (mapped, 6to4,
Teredo, NAT64) are judged by that address too."""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

NAT64 = ipaddress.ip_network("64:ff9b::/96")                # RFC 6052: the IPv4 address is the last 32 bits
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")        # RFC 8215: where it sits depends on the site


@dataclass(frozen=True)
class Target:
    """Where a notice goes: the URL's scheme, name and port (for the Host header and
    TLS), and the addresses checked for it, the only ones connected to."""
    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]


class TargetRefused(ValueError):
    """The URL points where the service does not send notices."""


def check(url: str, allowed_networks: list[str], resolve: bool = False) -> list:
    """Refuse the URL, or return the addresses checked (none for an unresolved name)."""
    host = split(url).hostname
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if host.lower().rstrip(".") == "localhost" or host.lower().rstrip(".").endswith(".localhost"):
            addresses = [ipaddress.ip_address("127.0.0.1")]
        elif not resolve:
            return []
        else:
            addresses = resolved(host)
    for address in addresses:
        why = refusal(address, allowed_networks)
        if why:
            shown = host if str(address) == host else f"{host} ({address})"
            raise TargetRefused(f"{shown} is {why}; the service sends no notices there unless an operator "
                                "lists its network in webhook_allowed_networks")
    return addresses


def pin(url: str, allowed_networks: list[str]) -> Target:
    """Resolve and check the URL's host once; the notice is sent to these addresses only."""
    parts = split(url)
    addresses = check(url, allowed_networks, resolve=True)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, tuple(dict.fromkeys(str(a) for a in addresses)))


def split(url: str):
    try:
        parts = urlsplit(url)
        parts.port   # noqa: B018 - raises for a port out of range
    except ValueError as exc:   # e.g. an unbalanced "[" or "]", port 99999
        raise TargetRefused(f"{url[:100]} is not a URL: {exc}") from None
    if not parts.hostname:
        raise TargetRefused(f"{url[:100]} names no host")
    if "@" in parts.netloc:   # never sent (the POST carries no Authorization), yet kept in the audit record
        raise TargetRefused(f"{parts.hostname}: a user name or password in the URL is not sent; the service "
                            "signs each notice with the webhook's secret instead")
    if parts.port == 0:   # else sent to the scheme's port, not the one written
        raise TargetRefused(f"{url[:100]}: port 0 is no port")
    if parts.netloc.lower().startswith("[v"):   # (no user part: refused above)
        raise TargetRefused(f"{url[:100]}: an IPvFuture address is no address the service sends to")
    return parts


def resolved(host: str) -> list:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise TargetRefused(f"{host} does not resolve: {exc.strerror}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def refusal(address, allowed_networks: list[str]) -> str | None:
    """Why the service does not POST to `address`, or None."""
    if address.version == 6 and address.ipv4_mapped:   # ::ffff:127.0.0.1 is 127.0.0.1
        why = refusal(address.ipv4_mapped, allowed_networks)
        return why and f"IPv4-mapped for {address.ipv4_mapped}, {why}"
    for form, inner in embedded(address):
        why = refusal(inner, allowed_networks)
        if why:
            return f"{form} for {inner}, {why}"
    if any(address in ipaddress.ip_network(net, strict=False) for net in allowed_networks):
        return None
    if address.version == 6 and (address in NAT64 or address in NAT64_LOCAL):
        return "a NAT64 address"   # a translator's way into IPv4 space: only through an allowed network
    for kind in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return f"a {kind.replace('_', '-')} address"
    if not address.is_global:
        return "not a global address"
    return None


def embedded(address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address reaches through a translator or tunnel."""
    if address.version != 6:
        return []
    found = []
    if address.sixtofour:
        found.append(("6to4", address.sixtofour))
    if address.teredo:
        found += [("Teredo", inner) for inner in address.teredo]
    if address in NAT64 or address in NAT64_LOCAL:   # for the local-use prefix, the last 32 bits are a guess
        found.append(("NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)))
    return found


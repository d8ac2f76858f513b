"""The marker of a lease's next page of events (GET /v1/leases/{id}/events): where the page before
ended, so that the next is read from there off the index (lease_id, id), whatever the events
before it. That place is an event's id, which counts every project's events: two markers would
tell a tenant how busy the others were. So the marker holds it sealed (AES-GCM under a key of the
service's, the lease and the order bound to it): it opens only for the listing it came from.

A marker of digits is a count, the events the pages before listed (the links of earlier
releases, and the CLI's `after`): still taken, read past (its cost grows with the count)."""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gpu_tenancy import error_codes as codes
from gpu_tenancy.errors import BadRequest

VERSION = "e1"
NONCE = 12
SEALED_LENGTH = len(VERSION) + 1 + 48   # base64url of the nonce, the 8-byte id and the 16-byte tag


def marker_key(service_key: bytes) -> bytes:
    """The markers' own key, from the one every process of the service shares (the offers')."""
    return hashlib.sha256(b"gpu-tenancy event markers\0" + service_key).digest()


@dataclass(frozen=True)
class Place:
    """Where a page starts: after the event `after` (an id: None, from the first) less `skip`."""
    skip: int = 0
    after: int | None = None


def _bound(lease_id: str, newest_first: bool) -> bytes:
    return f"{VERSION}\0{lease_id}\0{'desc' if newest_first else 'asc'}".encode()


def seal(key: bytes, lease_id: str, newest_first: bool, event_id: int) -> str:
    nonce = os.urandom(NONCE)
    sealed = AESGCM(key).encrypt(nonce, event_id.to_bytes(8, "big"), _bound(lease_id, newest_first))
    return f"{VERSION}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"


def place(key: bytes, lease_id: str, newest_first: bool, marker: str | None) -> Place:
    """Where the page `marker` asks for starts; a 400 for a marker that is neither a count nor one
    this service gave for this lease's events in this order."""
    if marker is None:
        return Place()
    if re.fullmatch(r"[0-9]{1,9}", marker):
        return Place(skip=int(marker))
    bad = BadRequest(f"marker {marker[:64]} is not one of this lease's events links in this order "
                     "(sort_dir), nor a count of events: take it from events_links", codes.INVALID_MARKER)
    if len(marker) != SEALED_LENGTH or not marker.startswith(VERSION + "."):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(marker[len(VERSION) + 1:])
        opened = AESGCM(key).decrypt(raw[:NONCE], raw[NONCE:], _bound(lease_id, newest_first))
    except (ValueError, binascii.Error, InvalidTag):   # not base64url, or not sealed here for this
        raise bad from None
    return Place(after=int.from_bytes(opened, "big"))

"""A tenant lease's server that its member resized off the lease's flavor: whose it is now.

The lease's servers are those on its flavor; a member may resize one to another flavor, and
confirm it (or leave it VERIFY_RESIZE, Nova holding the old flavor's claim: the lease's GPUs
and unit). Off the lease's flavor the server is no longer the lease's, and its end must not
delete it; but a tenant must not keep GPUs past the lease's end by a resize either. So, by the
flavor it is on now (ServerState.flavor):

- the lease's: the lease's server, deleted with it;
- one without GPUs, or another lease's (its GPUs are that lease's in the ledger, a unit of its
  class: that lease records it and deletes it at its own end): released from this lease, kept
  (a resize left unconfirmed is confirmed at the end, which gives the lease's GPUs back);
- any other (GPUs no lease accounts for, or a flavor the cloud did not describe): deleted at the
  lease's end as if it were still the lease's, so that no GPU it took stays taken outside the ledger.
"""
from __future__ import annotations

import enum

from gpu_tenancy.cloud.driver import ServerState


class Fate(enum.Enum):
    LEASES = "the lease's"
    RELEASED = "released"
    CONFIRM = "released once its resize is confirmed"
    ESCAPED = "on GPUs no lease accounts for"


def fate(state: ServerState, lease_id: str, flavor_id: str | None) -> Fate:
    """What the end of lease `lease_id` (its flavor `flavor_id`) does with this server of it."""
    flavor = state.flavor
    if state.status == "DELETED":
        return Fate.LEASES
    if flavor is None:   # a driver that does not say: a resize awaiting its confirmation is off the flavor
        return Fate.CONFIRM if state.status == "VERIFY_RESIZE" else Fate.LEASES
    if flavor.is_lease(lease_id, flavor_id):
        return Fate.LEASES
    if flavor.gpus is False or flavor.lease_id is not None:
        return Fate.CONFIRM if state.status == "VERIFY_RESIZE" else Fate.RELEASED
    return Fate.ESCAPED


def released(state: ServerState) -> str:
    """The event's words for a server released from the lease."""
    flavor = state.flavor
    named = f" {flavor.name or flavor.id}" if flavor is not None and (flavor.name or flavor.id) else ""
    what = (f"another lease's flavor{named} (its GPUs are that lease's)" if flavor is not None and flavor.lease_id
            else f"flavor{named}, without GPUs")
    then = (": its resize is confirmed once the lease's other servers are gone"
            if state.status == "VERIFY_RESIZE" else "")
    return (f"server {state.id}, resized by its project to {what}, is no longer the lease's: released from "
            f"the lease and kept, not deleted{then}; the lease's GPUs it held are given back")


def escaped(state: ServerState) -> str:
    flavor = state.flavor
    named = f" {flavor.name or flavor.id}" if flavor is not None and (flavor.name or flavor.id) else ""
    return (f"server {state.id}, resized by its project to flavor{named}, a GPU flavor no lease accounts for "
            "(or one the cloud did not describe), is deleted with the lease: its GPUs are not kept past the "
            "lease's end outside the ledger")

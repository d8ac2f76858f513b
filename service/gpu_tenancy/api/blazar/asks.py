"""Blazar's lease bodies read into gpu-tenancy's typed commands (domain/lease_ask.py),
with Blazar's own checks and words where a Blazar client relies on them (gabbits of
blazar-tempest-plugin match the texts): "Missing parameter end_date", "<date> is an
invalid date. Required format: %Y-%m-%d %H:%M", "End date must be later than start
date.".

A lease asks for one instance reservation: `flavor:instance` with `flavor_id` naming a
shape (GET /v1/shapes: the GPU flavors on offer), or `virtual:instance` with the
shape's vcpus, memory_mb and disk_gb (and, when several shapes have them,
`resource_properties` '["==", "$shape", "<name>"]' or '["==", "$gpu_model", "<model>"]').
`amount` is the lease's instances. The tenant boots them with the lease's flavor
(boot "tenant"), as with a Blazar flavor reservation. What gpu-tenancy cannot promise
(whole hosts, affinity, events of the client's own, a different start) is a 400.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy import error_codes as codes
from gpu_tenancy.domain.blazar import reservation_id
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.lease_ask import Boot, EndChange, LeaseAsk
from gpu_tenancy.errors import BadRequest, Conflict
from gpu_tenancy.timeutil import blazar_time_field

INSTANCE_TYPES = ("flavor:instance", "virtual:instance")
NOT_OFFERED = {
    "physical:host": "physical:host reservations are not offered here: gpu-tenancy leases GPUs as VMs, not whole "
                     "hosts; reserve resource_type=flavor:instance with flavor_id=<shape> (GET /v1/shapes)",
    "virtual:floatingip": "virtual:floatingip reservations are not offered here: a lease's VMs get floating IPs "
                          "from the project's own quota",
}
CREATE_KEYS = {"name", "start_date", "end_date", "before_end_date", "reservations", "events"}
UPDATE_KEYS = {"name", "start_date", "end_date", "before_end_date", "reservations"}
RESERVATION_KEYS = {
    "flavor:instance": {"resource_type", "flavor_id", "amount", "affinity"},
    "virtual:instance": {"resource_type", "vcpus", "memory_mb", "disk_gb", "amount", "affinity",
                         "resource_properties"},
}
MAX_NAME = 80            # Blazar's column
MAX_AMOUNT = 1000        # the native API's most instances
MAX_PROPERTIES = 256     # resource_properties: '["==", "$gpu_model", "<64 characters>"]' and room to spare
NO_AFFINITY = (None, "None", "none", "")


@dataclass(frozen=True)
class Asked:
    """A create: the lease asked for, and the start as the client gave it (None: now)."""
    ask: LeaseAsk
    start: int | None


def missing(param: str) -> BadRequest:
    return BadRequest(f"Missing parameter {param}", codes.BLAZAR_MISSING_PARAMETER)


def malformed(param: str, why: str) -> BadRequest:
    return BadRequest(f"Malformed parameter {param}: {why}", codes.BLAZAR_BAD_RESERVATION)


def check_keys(body: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(str(k)[:64] for k in body if k not in allowed)
    if unknown:
        raise BadRequest(f"unknown {where} parameters: {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}",
                         codes.INVALID_INPUT)


def name_of(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME or not value.isprintable():
        raise malformed("name", f"a printable string of 1 to {MAX_NAME} characters")
    return value


def unsupported_extras(body: dict) -> None:
    if body.get("before_end_date") not in (None, ""):
        raise BadRequest("before_end_date is not supported: gpu-tenancy warns before a lease's end by its own "
                         "setting (warn_before_end_seconds) with a lease event and webhook",
                         codes.BLAZAR_UNSUPPORTED)
    if body.get("events") not in (None, []):
        raise BadRequest("events of the client's own are not supported: a lease has its start_lease and "
                         "end_lease events", codes.BLAZAR_UNSUPPORTED)


def create_ask(session: Session, body: dict, now: int) -> Asked:
    """A POST /leases body as the lease to make (Blazar's checks, in Blazar's order)."""
    check_keys(body, CREATE_KEYS, "lease")
    for param in ("name", "start_date", "end_date"):
        if param not in body:
            raise missing(param)
    name = name_of(body["name"])
    now_minute = now - now % 60      # Blazar reads "now" to the minute
    start = None if body["start_date"] == "now" else blazar_time_field("start_date", body["start_date"])
    end = now_minute if body["end_date"] == "now" else blazar_time_field("end_date", body["end_date"])
    if start is not None and start < now_minute:
        raise BadRequest("Start date must be later than current date", codes.BAD_TIME)
    if end <= (now_minute if start is None else start):
        raise BadRequest("End date must be later than start date.", codes.BAD_END)
    duration = end - (now if start is None else start)
    if duration < 60:
        raise BadRequest("End date must be at least a minute after the start date", codes.BAD_END)
    unsupported_extras(body)
    shape, amount = reservation_of(session, body.get("reservations"))
    return Asked(LeaseAsk(shape=shape, duration=duration, name=name, instances=amount, start=start,
                          boot=Boot.TENANT), start)


def reservation_of(session: Session, reservations: object) -> tuple[str, int]:
    """The one instance reservation of a lease: its shape and amount."""
    if not isinstance(reservations, list) or not reservations:
        raise BadRequest("a gpu-tenancy lease reserves GPUs: give one reservation of resource_type "
                         "flavor:instance (flavor_id=<shape>, amount=<VMs>) or virtual:instance",
                         codes.BLAZAR_BAD_RESERVATION)
    for reservation in reservations:
        if not isinstance(reservation, dict):
            raise malformed("reservations", "each reservation is an object")
        if "resource_type" not in reservation:
            raise missing("resource_type")
        kind = reservation["resource_type"]
        if isinstance(kind, str) and kind in NOT_OFFERED:   # a list or object is no key (unhashable)
            raise BadRequest(NOT_OFFERED[kind], codes.BLAZAR_UNSUPPORTED)
        if kind not in INSTANCE_TYPES:
            raise BadRequest(f"The {str(kind)[:64]} resource type is not supported", codes.BLAZAR_UNSUPPORTED)
    if len(reservations) > 1:
        raise BadRequest("a gpu-tenancy lease has one instance reservation (one shape, `amount` VMs); make one "
                         "lease per reservation", codes.BLAZAR_BAD_RESERVATION)
    reservation = reservations[0]
    kind = reservation["resource_type"]
    check_keys(reservation, RESERVATION_KEYS[kind], kind)
    if reservation.get("affinity") not in NO_AFFINITY:
        raise BadRequest("affinity is not supported: gpu-tenancy places the VMs (each VM's GPUs on one host); "
                         "leave affinity out or None", codes.BLAZAR_UNSUPPORTED)
    amount = whole("amount", reservation.get("amount"), 1, MAX_AMOUNT)
    if kind == "flavor:instance":
        flavor = reservation.get("flavor_id")
        if flavor in (None, ""):
            raise missing("flavor_id")
        if not isinstance(flavor, str) or len(flavor) > 64:
            raise malformed("flavor_id", "the name of a shape (GET /v1/shapes)")
        return flavor, amount
    return shape_with(session, reservation), amount


def whole(param: str, value: object, least: int, most: int) -> int:
    if value is None or value == "":
        raise missing(param)
    # ASCII digits only: str.isdigit() is true of '²' and '⑦', which int() refuses; and few
    # of them (int() refuses thousands of digits)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise malformed(param, f"a whole number from {least} to {most}")
    return value


def shape_with(session: Session, reservation: dict) -> str:
    """The shape a virtual:instance reservation describes: its vcpus, memory_mb and
    disk_gb, narrowed by resource_properties when several shapes have them."""
    vcpus = whole("vcpus", reservation.get("vcpus"), 1, 1024)
    ram = whole("memory_mb", reservation.get("memory_mb"), 1, 16 * 1024 * 1024)
    disk = whole("disk_gb", reservation.get("disk_gb"), 0, 65536)
    key, wanted = properties(reservation.get("resource_properties"))
    shapes = session.scalars(select(m.Shape).where(m.Shape.retired_at.is_(None), m.Shape.vcpus == vcpus,
                                                   m.Shape.ram_mb == ram, m.Shape.disk_gb == disk)
                             .order_by(m.Shape.name)).all()
    if key is not None:
        shapes = [s for s in shapes if getattr(s, "name" if key == "shape" else "gpu_model") == wanted]
    if len(shapes) == 1:
        return shapes[0].name
    asked = f"vcpus={vcpus}, memory_mb={ram}, disk_gb={disk}" + (f", {key}={wanted}" if key else "")
    if not shapes:
        raise BadRequest(f"no shape on offer has {asked} (GET /v1/shapes); reserve flavor:instance with "
                         "flavor_id=<shape>", codes.BLAZAR_BAD_RESERVATION)
    raise BadRequest(f"several shapes have {asked}: {', '.join(s.name for s in shapes)}; name one with "
                     "resource_properties '[\"==\", \"$shape\", \"<name>\"]'", codes.BLAZAR_BAD_RESERVATION)


def properties(value: object) -> tuple[str | None, str | None]:
    """resource_properties: empty, or one equality on $shape or $gpu_model (JSON text)."""
    if value in (None, "", "[]"):
        return None, None
    try:
        # the one equality is short: a longer text is refused unread (deep nesting made json.loads recurse)
        parsed = json.loads(value) if isinstance(value, str) and len(value) <= MAX_PROPERTIES else None
    except ValueError:
        parsed = None
    if (isinstance(parsed, list) and len(parsed) == 3 and parsed[0] in ("=", "==")
            and parsed[1] in ("$shape", "$gpu_model") and isinstance(parsed[2], str)):
        return parsed[1][1:], parsed[2]
    raise malformed("resource_properties", "empty, or '[\"==\", \"$shape\", \"<name>\"]' or "
                                           "'[\"==\", \"$gpu_model\", \"<model>\"]'")


@dataclass(frozen=True)
class Update:
    """A PUT /leases/<id>: a new name and a new end, each None when unchanged; `end_now`: the new
    end is now ("now", or the current minute), which ends the lease now, as Blazar's end event would."""
    name: str | None
    end: EndChange | None
    end_now: bool = False


def update(body: dict, row: m.Lease, start: int, end: int, now: int, final: bool) -> Update:
    """A PUT body as the changes it asks for. `start`, `end`: the lease as the client was
    shown it (view.window)."""
    check_keys(body, UPDATE_KEYS, "lease")
    name = name_of(body["name"]) if "name" in body and body["name"] != row.name else None
    change = end_change(body, row, start, end, now, final)
    if change is ENDS_NOW:
        return Update(name, None, end_now=True)
    return Update(name, change)


# end_change's answer for a new end that has come already (Blazar ends the lease at it)
ENDS_NOW = EndChange(duration=1)


def end_change(body: dict, row: m.Lease, start: int, end: int, now: int, final: bool) -> EndChange | None:
    """The change of end a PUT body asks for (None: none)."""
    unsupported_extras(body)
    if "reservations" in body:
        check_reservations_unchanged(body["reservations"], row)
    now_minute = now - now % 60
    if "start_date" in body:
        asked = now_minute if body["start_date"] == "now" else blazar_time_field("start_date", body["start_date"])
        if asked != start - start % 60:
            raise Conflict("start_date cannot be updated: a lease starts when the queue gives it its GPUs, at "
                           "the earliest at its asked start", codes.BLAZAR_CANT_UPDATE)
    if "end_date" not in body:
        return None
    if final:
        raise BadRequest("Terminated leases can only be renamed", codes.LEASE_FINISHED)
    new_end = now_minute if body["end_date"] == "now" else blazar_time_field("end_date", body["end_date"])
    if new_end < now_minute or new_end < start - start % 60:
        raise BadRequest("End date must be later than current and start date", codes.BAD_END)
    if new_end == end - end % 60:   # the minute the client was shown: no change
        return None
    if new_end <= now:   # "now", or the minute under way: Blazar's end event comes at once
        return ENDS_NOW
    if new_end <= start:   # in the minute it starts, after the minute's first second
        raise BadRequest("End date must be later than current and start date", codes.BAD_END)
    # as a duration from the start the client was shown: for a waiting lease that is the queue's
    # ETA, not its asked start, from which the engine would read an end time
    return EndChange(duration=new_end - start, shrink=True)   # Blazar shortens a lease as it extends one


def check_reservations_unchanged(reservations: object, row: m.Lease) -> None:
    if not isinstance(reservations, list) or not all(isinstance(r, dict) for r in reservations):
        raise malformed("reservations", "a list of objects")
    ours = reservation_id(row.id)
    if any("id" not in r for r in reservations):
        raise missing("reservation ID")
    wrong = [str(r["id"])[:64] for r in reservations if r["id"] != ours]
    if wrong:
        raise BadRequest("Please enter valid reservation IDs. Invalid reservation IDs are: " + ",".join(wrong),
                         codes.BLAZAR_BAD_RESERVATION)
    if any(set(r) - {"id", "resource_type"} for r in reservations):
        raise Conflict("Updating leases for 'flavor:instance' type reservations is not yet supported.",
                       codes.BLAZAR_CANT_UPDATE)

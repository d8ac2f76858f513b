"""The lease commands' request schemas, and the typed commands (domain/lease_ask.py)
built from a body that passed one: every time and duration read here, once."""
from __future__ import annotations

from gpu_tenancy.api.validation import PRINTABLE
from gpu_tenancy.domain.lease_ask import Boot, EndChange, LeaseAsk, VolumeAsk
from gpu_tenancy.timeutil import duration_field, time_field

# A lease's name is shown on operators' terminals, the dashboard and webhook receivers' logs
NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": PRINTABLE,
        "description": "printable text: no control, zero-width or direction-turning character"}
# A volume's id, as Cinder makes them (GET /v1/volumes lists them): it goes into the path of the
# cloud's request with the service's admin rights (openstacksdk does not quote it), where anything
# else names another of Cinder's paths ("detail?all_tenants=1": every project's volumes)
VOLUME_ID = {"type": "string", "pattern": r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
                                          r"[0-9A-Fa-f]{12}$", "description": "the id of a volume of the project"}
TIME = {"type": "string", "minLength": 1, "maxLength": 64}
DURATION = {"oneOf": [{"type": "string", "minLength": 2, "maxLength": 64},
                      {"type": "integer", "minimum": 1, "maximum": 10 * 365 * 86400}],
            "description": "a duration: ISO 8601 (PT24H, P2D), a number with a unit (24h, 90m, 7d), Slurm's "
                           "[D-]HH:MM:SS (1-00:00:00), or whole seconds, at least 60"}

CREATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["shape", "duration"],
    "properties": {
        "name": NAME,
        "shape": {"type": "string", "minLength": 1, "maxLength": 64},
        "instances": {"type": "integer", "minimum": 1, "maximum": 1000},
        "start": TIME,
        "duration": DURATION,
        "latest_start": TIME,
        "image": {"type": "string", "minLength": 1, "maxLength": 128},
        "volume": {"oneOf": [
            {"type": "object", "additionalProperties": False, "required": ["size_gb"],
             "properties": {"size_gb": {"type": "integer", "minimum": 1, "maximum": 65536}}},
            {"type": "object", "additionalProperties": False, "required": ["id"],
             "properties": {"id": VOLUME_ID}}],
                   "description": 'a new volume, {"size_gb": N} (1 to 65536 GB), or one of the project\'s '
                                  'volumes, {"id": "<volume id>"} (GET /v1/volumes)'},
        # Nova's own key pair names (2.92: letters, digits, space, _ - @ .): the name goes into the
        # path of the service's admin request for the user's key (openstacksdk does not quote it)
        "key_name": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^(?!\.+$)[-_@. A-Za-z0-9]+$"},
        "user_data": {"type": "string", "maxLength": 65535},
        "priority": {"type": "integer", "minimum": -100, "maximum": 100},
        "priority_class": {"type": "string", "minLength": 1, "maxLength": 64,
                           "description": "a class of GET /v1/priority_classes (instead of priority)"},
        "readiness_probe": {"type": "boolean", "description": "the VMs run the GPU readiness probe at first "
                                                              "boot; the lease is ready once each reports"},
        "boot": {"type": "string", "enum": [b.value for b in Boot],
                 "description": "service (default): the service boots the VMs with the standard image; "
                                "tenant: the service boots nothing, the project's members boot up to "
                                "`instances` servers with the lease's flavor while it is active"},
        "network": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f]*$",
                    "description": "id or name of a network the project can use (default: its only "
                                   "network, else the operator's default, else one made for it)"},
        "floating_ip": {"type": "boolean", "description": "each VM gets a floating IP from the external network"},
        "accept_offer": {"type": "string", "minLength": 1, "maxLength": 1024,
                         "description": "take an alternative: the id of one of the `offers` a dry run or a "
                                        "create answered (valid offer_valid_seconds). Its shape, instances, "
                                        "duration and start replace the body's; the rest of the body is the "
                                        "lease's. Checked under the ledger lock: 409 (offer_gone) and nothing "
                                        "made if the plan no longer gives its start"},
    },
}

UPDATE = {
    "type": "object",
    "additionalProperties": False,
    # a new end or a new duration, not both; `shrink` only beside one of them
    "oneOf": [{"required": ["end"], "not": {"required": ["duration"]}},
              {"required": ["duration"], "not": {"required": ["end"]}}],
    "description": 'a new end, {"end": "<RFC 3339 time>"}, or a new duration, {"duration": "<duration>"}: '
                   'one of the two, with "shrink": true to make the lease shorter',
    "properties": {"end": TIME, "duration": DURATION,
                   "shrink": {"type": "boolean", "description": "the change may make the lease shorter (without "
                                                                "it, a change that would is refused: 409)"}},
}

def lease_ask(body: dict) -> LeaseAsk:
    """The create schema's body (CREATE) as a LeaseAsk."""
    volume = body.get("volume")
    start = body.get("start", "now")
    latest = body.get("latest_start")
    return LeaseAsk(
        shape=body["shape"], duration=duration_field("duration", body["duration"]), name=body.get("name"),
        instances=body.get("instances", 1),
        start=None if start == "now" else time_field("start", start),
        latest_start=None if latest is None else time_field("latest_start", latest),
        image=body.get("image"),
        volume=None if volume is None else VolumeAsk(size_gb=volume.get("size_gb"), id=volume.get("id")),
        key_name=body.get("key_name"), user_data=body.get("user_data"),
        priority=body.get("priority"), priority_class=body.get("priority_class"),
        readiness_probe=bool(body.get("readiness_probe")), boot=Boot(body.get("boot", Boot.SERVICE)),
        network=body.get("network"), floating_ip=bool(body.get("floating_ip")),
        accept_offer=body.get("accept_offer"))


def end_change(body: dict) -> EndChange:
    """The update schema's body (UPDATE) as an EndChange."""
    if "duration" in body:
        return EndChange(duration=duration_field("duration", body["duration"]), shrink=bool(body.get("shrink")))
    return EndChange(end=time_field("end", body["end"]), shrink=bool(body.get("shrink")))

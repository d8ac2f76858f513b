"""The create schema (POST /v1/leases) and LeaseAsk name the same fields, and the
API's reading of a body fills every one: a lease field added to the schema and not to
the dataclass (or back), or not read into it, fails here."""
from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from gpu_tenancy.api.lease_commands import CREATE, UPDATE, end_change, lease_ask
from gpu_tenancy.domain.lease_ask import SERVICE_BOOT_ONLY, Boot, EndChange, LeaseAsk, VolumeAsk
from gpu_tenancy.errors import BadRequest

# a value for each property of the create schema, none of them its field's default
EVERY_FIELD = {
    "name": "train", "shape": "a100.x8", "instances": 3, "start": "2026-12-01T10:00:00Z", "duration": "PT2H",
    "latest_start": "2026-12-01T12:00:00Z", "image": "ubuntu-22.04-cuda", "volume": {"size_gb": 100},
    "key_name": "mine", "user_data": "#cloud-config", "priority": -5, "priority_class": "batch",
    "readiness_probe": True, "boot": "tenant", "network": "private", "floating_ip": True, "accept_offer": "o1.x.y",
}


def test_the_create_schema_and_lease_ask_have_the_same_fields():
    assert set(CREATE["properties"]) == {f.name for f in fields(LeaseAsk)}
    assert set(CREATE["required"]) == {f.name for f in fields(LeaseAsk) if f.default is MISSING}


def test_the_update_schema_and_end_change_have_the_same_fields():
    assert set(UPDATE["properties"]) == {f.name for f in fields(EndChange)}


def test_every_field_of_a_body_is_read_into_the_ask():
    assert set(EVERY_FIELD) == set(CREATE["properties"])   # the sample keeps up with the schema
    ask = lease_ask(EVERY_FIELD)
    default = LeaseAsk(shape="", duration=0)
    for f in fields(LeaseAsk):
        if f.name not in ("shape", "duration"):
            assert getattr(ask, f.name) != getattr(default, f.name), f"{f.name} is not read from the body"
    assert ask == LeaseAsk(
        shape="a100.x8", duration=7200, name="train", instances=3, start=1796119200, latest_start=1796126400,
        image="ubuntu-22.04-cuda", volume=VolumeAsk(size_gb=100), key_name="mine", user_data="#cloud-config",
        priority=-5, priority_class="batch", readiness_probe=True, boot=Boot.TENANT, network="private",
        floating_ip=True, accept_offer="o1.x.y")


def test_a_bare_body_asks_with_the_defaults():
    assert lease_ask({"shape": "a100.x1", "duration": 3600}) == LeaseAsk("a100.x1", 3600)
    assert lease_ask({"shape": "a100.x1", "duration": "1h", "start": "now"}).start is None


@pytest.mark.parametrize("body, field, code", [
    ({"shape": "a", "duration": "tomorrow"}, "duration", "gpu_tenancy.bad_duration"),
    ({"shape": "a", "duration": 30}, "duration", "gpu_tenancy.bad_duration"),
    ({"shape": "a", "duration": "1h", "start": "10:00"}, "start", "gpu_tenancy.bad_time"),
    ({"shape": "a", "duration": "1h", "latest_start": "2026-12-01T10:00:00"}, "latest_start", "gpu_tenancy.bad_time"),
])
def test_a_time_or_duration_that_is_not_one_is_a_400_naming_its_field(body, field, code):
    with pytest.raises(BadRequest) as raised:
        lease_ask(body)
    assert raised.value.code == code and raised.value.detail.startswith(f"{field}: ")


def test_an_end_change_has_an_end_or_a_duration():
    assert end_change({"duration": "P1D"}) == EndChange(duration=86400)
    assert end_change({"end": "2026-12-01T10:00:00Z", "shrink": True}) == EndChange(end=1796119200, shrink=True)
    with pytest.raises(ValueError):
        EndChange()
    with pytest.raises(ValueError):
        EndChange(end=1, duration=1)


def test_the_service_boot_fields_are_fields_of_the_ask():
    assert set(SERVICE_BOOT_ONLY) <= {f.name for f in fields(LeaseAsk)}
    assert lease_ask({"shape": "a", "duration": "1h", "boot": "tenant"}).service_boot_fields_given() == []
    assert lease_ask(EVERY_FIELD).service_boot_fields_given() == list(SERVICE_BOOT_ONLY)


# Where each field of LeaseAsk is kept (Lease columns) and shown (a key of the lease's
# answer; None: never shown). A new field must be added here, with its column and its
# key, and both must exist: the four places of docs/design.md's checklist in one test.
KEPT_AND_SHOWN = {
    "shape": (("shape",), "shape"),
    "duration": (("duration",), "duration"),
    "name": (("name",), "name"),
    "instances": (("instances",), "instances"),
    "start": (("earliest_start",), "requested_start"),
    "latest_start": (("latest_start",), "latest_start"),
    "image": (("image",), "image"),
    "volume": (("volume_size_gb", "volume_id"), "volume"),
    "key_name": (("key_name",), "key_name"),
    "user_data": (("user_data",), None),   # it may hold secrets: given to the VMs only
    "priority": (("priority",), "priority"),
    "priority_class": (("priority_class",), "priority_class"),
    "readiness_probe": (("readiness_probe",), "readiness"),
    "boot": (("boot",), "boot"),
    "network": (("network_id", "network_name"), "network"),
    "floating_ip": (("floating_ip",), "floating_ip"),
    "accept_offer": ((), None),   # how the lease is made (its fields replace others), not kept
}


def test_every_field_of_the_ask_has_a_column_and_a_key_of_the_answer():
    from gpu_tenancy.api.lease_view import FIELDS
    from gpu_tenancy.db.models import Lease

    assert set(KEPT_AND_SHOWN) == {f.name for f in fields(LeaseAsk)}
    columns = set(Lease.__table__.columns.keys())
    for name, (kept, shown) in KEPT_AND_SHOWN.items():
        assert set(kept) <= columns, f"{name}: no column {set(kept) - columns} in leases"
        assert shown is None or shown in FIELDS, f"{name}: the lease's answer has no key {shown!r}"

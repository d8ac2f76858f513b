"""A lease reads the same in the Blazar-compatible API's answer (api/blazar/view.py) and in
the lease.create / lease.update notice on the bus (engine/notifications.py): status, the
reservation's status and id, the events' statuses and times, and the dates. Both read
domain/blazar.py; this holds them to it for every state (a new state fails here until it
is given Blazar's words), and for a real lease through both faces."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from jsonschema import Draft202012Validator
from sqlalchemy import select

from gpu_tenancy.api.blazar import view
from gpu_tenancy.api.blazar.schemas import SCHEMAS
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.domain import blazar
from gpu_tenancy.domain.states import LeaseState
from gpu_tenancy.engine import notifications as n
from tests.conftest import headers

MEMBER = headers("ml-vision", "member", "alice")
CREATED = datetime(2026, 12, 1, 8, 0, 0, 123456)    # the database keeps microseconds on some backends


def lease(state: LeaseState, committed: bool) -> m.Lease:
    """A lease in `state`, with a committed window or (waiting) a queue ETA only."""
    start = CREATED + timedelta(hours=3)
    return m.Lease(
        id="3f0c2d1e-0000-4000-8000-000000000001", name="agree", project_id="ml-vision", user_id="alice",
        status=state.value, shape="a100.x1", gpu_model="A100", gpus_per_vm=1, instances=2, duration=7200,
        earliest_start=CREATED + timedelta(hours=1), start_at=start if committed else None,
        end_at=start + timedelta(hours=2, minutes=5) if committed else None,
        queue_eta=None if committed else CREATED + timedelta(hours=2), queue_reasons=[],
        flavor_id="f-1", flavor_name="lease-agree", priority_class=None, preemptible=False,
        created_at=CREATED, updated_at=CREATED + timedelta(seconds=90, microseconds=7))


def agreed_part(lease_doc: dict) -> dict:
    [reservation] = lease_doc["reservations"]
    return {key: lease_doc[key] for key in ("status", "start_date", "end_date", "created_at", "updated_at")} | {
        "reservation": (reservation["id"], reservation["status"], reservation["created_at"],
                        reservation["updated_at"]),
        "events": [(e["event_type"], e["status"], e["time"]) for e in lease_doc["events"]]}


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "waiting"])
@pytest.mark.parametrize("state", list(LeaseState), ids=lambda s: s.value)
def test_the_api_and_the_notice_agree_on_a_lease_in_every_state(state, committed):
    row = lease(state, committed)
    notice = n.payload(row)
    assert notice["status"] == blazar.blazar_status(state).lease
    if not view.visible(row):
        assert state is LeaseState.CANCELLED and notice["status"] == "TERMINATED"   # its lease.delete
        return
    answer = view.render(row, None)
    Draft202012Validator(SCHEMAS["BlazarLease"]).validate(answer)   # the OpenAPI document says what it shows
    assert agreed_part(answer) == agreed_part(notice)
    assert answer["created_at"] == "2026-12-01T08:00:00.123456"
    assert answer["start_date"] == ("2026-12-01T11:00:00.000000" if committed else "2026-12-01T10:00:00.000000")


@pytest.fixture
def config(db_url):
    return Config.load(database_url=db_url, auth_strategy="noauth2", run_engine=True,
                       notifications_transport_url="fake://")


def test_a_lease_asked_through_the_blazar_api_reads_as_its_create_and_update_notices(client, runtime):
    made = client.post("/reservation/v1/leases", headers=MEMBER, json={
        "name": "agree", "start_date": "now", "end_date": "2026-12-01 18:00", "events": [],
        "reservations": [{"resource_type": "flavor:instance", "flavor_id": "a100.x1", "amount": 1}]})
    assert made.status_code == 201, made.get_json()
    lease_id = made.get_json()["lease"]["id"]
    with runtime.sessions() as s:
        [create] = [json.loads(r.payload) for r in s.scalars(select(m.BusNotice).where(
            m.BusNotice.lease_id == lease_id, m.BusNotice.event_type == n.CREATE))]
    assert agreed_part(made.get_json()["lease"]) == agreed_part(create)
    longer = client.put(f"/reservation/v1/leases/{lease_id}", json={"end_date": "2026-12-01 20:00"}, headers=MEMBER)
    assert longer.status_code == 200, longer.get_json()
    with runtime.sessions() as s:
        update = json.loads(s.scalars(select(m.BusNotice.payload).where(
            m.BusNotice.lease_id == lease_id, m.BusNotice.event_type == n.UPDATE).order_by(m.BusNotice.id.desc())).first())
    shown = client.get(f"/reservation/v1/leases/{lease_id}", headers=MEMBER).get_json()["lease"]
    assert agreed_part(shown) == agreed_part(update) and shown["end_date"].startswith("2026-12-01T20:00")

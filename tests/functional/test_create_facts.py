"""A create reads what its checks need in one statement (engine/ask_facts.py: the shapes
offered, the quota, the hosts' GPUs, a name taken, the ledger's counts) and keeps none of
it between requests: an operator's change is seen by the very next create, on the fitted
path (engine/plan_insert.py) as well as the replanned one."""
from __future__ import annotations

import pytest

from sqlalchemy import select, text

from gpu_tenancy.api.lease_view import render_basis
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive
from gpu_tenancy.domain.lease_ask import LeaseAsk
from gpu_tenancy.engine import lease_insert, leases, plan_insert
from gpu_tenancy.engine.leases import Caller
from gpu_tenancy.timeutil import rfc3339
from tests.conftest import headers
from tests.functional.test_create_statements import fitted
from tests.functional.test_plan_insert import fill

ADMIN = headers("ml-vision", "admin")
MEMBER = headers("ml-vision", "member")
X3 = {"name": "a100.x3", "gpu_model": "A100", "gpus": 3, "vcpus": 36, "ram_mb": 368640, "disk_gb": 150,
      "pci_alias": "a100"}


@pytest.fixture
def waiting(client, runtime):
    """A full cluster and a queue, so that each create below is fitted into the plan."""
    runtime.fits.min_waiting = 0
    fill(client)
    ask(client, "a100.x4", "queued-1")


def ask(client, shape: str, name: str | None = None, hours: int = 2):
    body = {"shape": shape, "duration": f"PT{hours}H", **({"name": name} if name else {})}
    return client.post("/v1/leases", json=body, headers=MEMBER)


def refused(reply, status: int) -> tuple[str, str]:
    assert reply.status_code == status, reply.get_json()
    error = reply.get_json()["errors"][0]
    return error["code"], error["detail"]


def test_a_shape_added_or_retired_is_seen_by_the_next_create(client, waiting):
    before = fitted(client)
    assert refused(ask(client, "a100.x3"), 400)[0] == "gpu_tenancy.unknown_shape"
    assert client.post("/v1/shapes", json=X3, headers=ADMIN).status_code == 201
    made = ask(client, "a100.x3")
    assert made.status_code == 201 and made.get_json()["lease"]["gpus_per_instance"] == 3
    assert made.get_json()["lease"]["status"] == "queued" and fitted(client) == before + 1
    assert client.delete("/v1/shapes/a100.x3", headers=ADMIN).status_code == 200
    code, detail = refused(ask(client, "a100.x3"), 400)
    assert code == "gpu_tenancy.unknown_shape"
    assert detail.endswith("the shapes offered are: a100.x1, a100.x2, a100.x4, a100.x8, h100.x1, h100.x2, h100.x4")


def test_a_quota_changed_is_seen_by_the_next_create(client, waiting):
    assert ask(client, "a100.x8").status_code == 201
    small = {"quota": {"gpu_models": {"A100": {"gpus": 4, "borrow_gpus": 0, "max_duration": 3 * 3600}}}}
    assert client.put("/v1/quotas/ml-vision", json=small, headers=ADMIN).status_code == 200
    code, detail = refused(ask(client, "a100.x8"), 403)
    assert code == "gpu_tenancy.over_quota" and "may hold 4 (+0 borrowed)" in detail
    assert refused(ask(client, "a100.x4", hours=4), 400)[0] == "gpu_tenancy.over_max_duration"
    none = {"quota": {"gpu_models": {"A100": {"gpus": 0, "borrow_gpus": 0}}}}
    assert client.put("/v1/quotas/ml-vision", json=none, headers=ADMIN).status_code == 200
    assert refused(ask(client, "a100.x1"), 403)[0] == "gpu_tenancy.no_quota"


def test_a_name_taken_names_that_lease_and_its_status(client, waiting):
    first = ask(client, "a100.x2", "twice").get_json()["lease"]
    code, detail = refused(ask(client, "a100.x1", "twice"), 409)
    assert code == "gpu_tenancy.lease_name_taken"
    assert f"already has a lease named 'twice' ({first['id']}, queued)" in detail
    assert client.delete(f"/v1/leases/{first['id']}", headers=MEMBER).status_code == 204
    assert ask(client, "a100.x1", "twice").status_code == 201   # a cancelled lease's name is free


def test_the_hosts_gpus_are_read_by_each_create(client, waiting, runtime, clock):
    """The demo cloud's 32 A100 are 4 hosts of 8: 5 x a100.x8 never fit; with a fifth host
    (as the engine's refresh writes it) they do, and the quota is what refuses them."""
    five = {"shape": "a100.x8", "instances": 5, "duration": "PT1H"}
    code, detail = refused(client.post("/v1/leases", json=five, headers=MEMBER), 400)
    assert code == "gpu_tenancy.never_fits" and "the cloud has 32, at most 8 on one host" in detail
    with session_scope(runtime.sessions) as session:
        session.add(m.Host(name="gpu-extra", gpu_model="A100", gpus=8, updated_at=utcnow_naive(clock.now())))
    code, detail = refused(client.post("/v1/leases", json=five, headers=MEMBER), 403)
    assert code == "gpu_tenancy.over_quota" and "needs 40 A100 GPUs" in detail


def test_a_new_lease_and_its_first_events_are_written_as_the_session_wrote_them(client, waiting, runtime):
    """engine/lease_insert.py writes the row and its events itself: the same events, its
    arrival the first one's id, and columns it was not given NULL (not JSON null)."""
    made = ask(client, "a100.x2", "rows").get_json()["lease"]
    with session_scope(runtime.sessions) as session:
        events = session.execute(select(m.Event.id, m.Event.kind, m.Event.actor, m.Event.from_state,
                                        m.Event.to_state, m.Event.message)
                                 .where(m.Event.lease_id == made["id"]).order_by(m.Event.id)).all()
        row = session.execute(select(m.Lease.arrival, m.Lease.status, m.Lease.user_id, m.Lease.queue_position,
                                     m.Lease.borrowing, m.Lease.eta_guarded, m.Lease.boot,
                                     text("volume_id IS NULL AND key_name IS NULL AND user_data IS NULL "
                                          "AND parked_at IS NULL"))
                              .where(m.Lease.id == made["id"])).one()
    user = MEMBER["X-User-Id"]
    assert [tuple(e)[1:] for e in events] == [
        ("transition", user, None, "requested", "asked for by the user"),
        ("transition", "planner", "requested", "queued", "waiting for its turn")]
    assert tuple(row) == (events[0].id, "queued", user, made["queue"]["position"], False, False, "service", True)


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_fitted_lease_and_its_audit_record_are_written_as_the_answer_tells(client, waiting, runtime, monkeypatch,
                                                                              pipeline):
    """A fitted create's queue place and arrival and its audit record (engine/lease_insert.py:
    commit_fitted, one statement on PostgreSQL, sent with the COMMIT where the driver can, or
    alone) are what the answer says and a read shows, once."""
    if not pipeline:
        monkeypatch.setattr(lease_insert, "pipelined", lambda driver: False)
    before = fitted(client)
    made = ask(client, "a100.x2", "audited").get_json()["lease"]
    assert fitted(client) == before + 1 and made["queue"]["position"] is not None
    with session_scope(runtime.sessions) as session:
        row = session.get_one(m.Lease, made["id"])
        records = session.scalars(select(m.AuditRecord).where(m.AuditRecord.target_id == made["id"])).all()
        first_event = session.scalar(select(m.Event.id).where(m.Event.lease_id == made["id"]).order_by(m.Event.id))
        assert row.arrival == first_event and row.plan_seq is not None and row.planned_hosts
        assert row.first_eta == row.queue_eta and row.network_via is not None
        # no lease has waited and started yet: a margin of 0, learnt from no one
        assert row.start_by_basis == {"source": "everyone", "samples": 0, "load_class": None}
        assert {"position": row.queue_position, "eta": rfc3339(to_epoch(row.queue_eta)),
                "start_by": rfc3339(to_epoch(row.first_start_by)), "reasons": row.queue_reasons,
                "start_by_basis": render_basis(row.start_by_ratio, row.start_by_basis)} == made["queue"]
    assert [(r.action, r.after) for r in records] == [("lease.create", made)]
    assert client.get(f"/v1/leases/{made['id']}", headers=MEMBER).get_json()["lease"]["queue"] == made["queue"]


def test_only_a_create_leaves_the_ledger_counts_for_its_fit(waiting, runtime, clock):
    """The ledger's counts a create's checks read are left in its session for its own fit
    (plan_insert.fit_made takes them); a dry run's checks, which fit nothing, leave none."""
    caller, ask_ = Caller("u1", "ml-vision"), LeaseAsk(shape="a100.x2", duration=3600)
    with session_scope(runtime.sessions) as session:
        leases.build_request(session, clock.now(), runtime.limits, caller, ask_, "dry-run")
        assert plan_insert.LEDGER_COUNTS not in session.info
        leases.create(session, clock.now(), runtime.limits, caller, ask_)
        assert session.info[plan_insert.LEDGER_COUNTS] == tuple(
            session.execute(select(m.Lock.generation, m.Lock.inserted).where(m.Lock.name == "ledger")).one())
        session.rollback()

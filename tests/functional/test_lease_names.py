"""A name finds one unfinished lease of a project: the create's and the rename's check refuse a
taken name, two creates of one name take turns, and the database's unique index (db/models.py)
refuses a write that passed the check all the same, with the same 409 and nothing of it kept."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.domain.states import FINAL
from gpu_tenancy.engine import leases
from tests.conftest import PG_URL, headers
from tests.races import Held, race

ASK = {"shape": "a100.x1", "duration": "PT2H"}


def kept(sessions, project: str, name: str) -> dict:
    """What the database holds of leases of that name: how many, unfinished, and their events and records."""
    with session_scope(sessions) as s:
        ids = list(s.scalars(select(m.Lease.id).where(m.Lease.project_id == project, m.Lease.name == name,
                                                      m.Lease.status.not_in([x.value for x in FINAL]))))
        return {"unfinished": ids,
                "leases": s.scalar(select(func.count()).select_from(m.Lease)),
                "events": s.scalar(select(func.count()).select_from(m.Event)),
                "records": s.scalar(select(func.count()).select_from(m.AuditRecord))}


def test_the_unfinished_states_of_the_index_are_the_states_with_no_way_out():
    listed = m.UNFINISHED.text.split("NOT IN", 1)[1]
    assert sorted(part.strip(" ()'") for part in listed.split(",")) == sorted(s.value for s in FINAL)


def test_a_taken_name_is_refused_and_free_again_once_its_lease_is_finished(client, sessions):
    made = client.post("/v1/leases", json={**ASK, "name": "train"}, headers=headers())
    assert made.status_code == 201
    again = client.post("/v1/leases", json={**ASK, "name": "train"}, headers=headers())
    assert again.status_code == 409 and again.get_json()["errors"][0]["code"] == codes.LEASE_NAME_TAKEN
    # another project's lease may have it
    assert client.post("/v1/leases", json={**ASK, "name": "train"}, headers=headers("nlp-lab")).status_code == 201
    first = made.get_json()["lease"]["id"]
    assert client.delete(f"/v1/leases/{first}", headers=headers()).status_code in (200, 202, 204)
    assert client.post("/v1/leases", json={**ASK, "name": "train"}, headers=headers()).status_code == 201
    assert len(kept(sessions, "ml-vision", "train")["unfinished"]) == 1


def test_a_create_past_the_check_is_refused_by_the_index_and_leaves_nothing(client, sessions, monkeypatch):
    """As when another request made the name between this one's check and its write."""
    assert client.post("/v1/leases", json={**ASK, "name": "train"}, headers=headers()).status_code == 201
    before = kept(sessions, "ml-vision", "train")
    monkeypatch.setattr(leases, "check_name_untaken", lambda *a: None)
    refused = client.post("/v1/leases", json={**ASK, "name": "train"}, headers=headers())
    assert refused.status_code == 409, refused.get_json()
    error = refused.get_json()["errors"][0]
    assert error["code"] == codes.LEASE_NAME_TAKEN and "'train'" in error["detail"]
    assert kept(sessions, "ml-vision", "train") == before   # no lease, event or record of it


def test_a_rename_past_the_check_is_refused_by_the_index_and_changes_nothing(client, sessions, monkeypatch):
    ids = [client.post("/v1/leases", json={**ASK, "name": n}, headers=headers()).get_json()["lease"]["id"]
           for n in ("train", "eval")]
    before = kept(sessions, "ml-vision", "train")
    monkeypatch.setattr(leases, "check_name_free", lambda *a: None)
    refused = client.put(f"/reservation/v1/leases/{ids[1]}", json={"name": "train"}, headers=headers())
    assert refused.status_code == 409, refused.get_json()
    assert kept(sessions, "ml-vision", "train") == before
    with session_scope(sessions) as s:
        assert s.get(m.Lease, ids[1]).name == "eval"


def test_a_blazar_update_refused_for_its_name_leaves_the_end_as_it_was(client, sessions, monkeypatch):
    """The end and the name of one Blazar update are one transaction: a name taken after the
    check (the index refuses it) leaves the end where it was, and no event or record of it."""
    ids = [client.post("/v1/leases", json={**ASK, "name": n}, headers=headers()).get_json()["lease"]["id"]
           for n in ("train", "eval")]
    with session_scope(sessions) as s:
        duration = s.get(m.Lease, ids[1]).duration
    before = kept(sessions, "ml-vision", "train")
    monkeypatch.setattr(leases, "check_name_free", lambda *a: None)
    refused = client.put(f"/reservation/v1/leases/{ids[1]}", json={"name": "train", "end_date": "2026-12-02 12:00"},
                         headers=headers())
    assert refused.status_code == 409, refused.get_json()
    assert kept(sessions, "ml-vision", "train") == before
    with session_scope(sessions) as s:
        row = s.get(m.Lease, ids[1])
        assert (row.name, row.duration) == ("eval", duration)


@pytest.mark.skipif(not PG_URL, reason="on SQLite a create holds the database's write lock from its start: "
                                       "two cannot pass the check at once")
def test_two_creates_with_one_name_at_once_make_one_lease(app, sessions, db_url, monkeypatch):
    """The first held just past its check: the second waits for the name's lock (engine/leases.py
    name_lock), then its check finds the first's lease."""
    point = Held()
    monkeypatch.setattr(leases, "check_name_untaken", point.around(leases.check_name_untaken))

    def create():
        reply = app.test_client().post("/v1/leases", json={**ASK, "name": "same"}, headers=headers())
        return reply.status_code, reply.get_json()
    answers = race(db_url, point, create, create)
    assert sorted(code for code, _ in answers) == [201, 409], answers
    refused = next(body for code, body in answers if code == 409)
    assert refused["errors"][0]["code"] == codes.LEASE_NAME_TAKEN
    made = next(body for code, body in answers if code == 201)["lease"]["id"]
    state = kept(sessions, "ml-vision", "same")
    assert state["unfinished"] == [made] and state["leases"] == 1 and state["records"] == 1


@pytest.mark.parametrize("name", ["train\x1b]52;c;cm0gLXJmIH4=\x07", "train\x7f", "train\x9b2J", "evil\u202egnp.exe",
                                  "two\u2028lines", "train\x00"])
def test_a_name_with_a_control_or_direction_character_is_refused_as_blazar_refuses_it(client, sessions, name):
    """A lease's name is shown on operators' terminals, the dashboard and receivers' logs: the
    native API takes what the Blazar API takes, printable text (no C0 or C1 control, DEL, or
    character that turns the text's direction), and says so."""
    before = kept(sessions, "ml-vision", "train")   # (the counts: PostgreSQL takes no NUL in a query either)
    for path in ("/v1/leases", "/v1/leases?dry_run=true"):
        refused = client.post(path, json={**ASK, "name": name}, headers=headers())
        assert refused.status_code == 400, refused.get_json()
        assert "name" in refused.get_json()["errors"][0]["detail"]
    assert kept(sessions, "ml-vision", "train") == before
    assert client.post("/v1/leases", json={**ASK, "name": "Modèle café 学習 – v2"}, headers=headers()).status_code == 201

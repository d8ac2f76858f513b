"""A unique key that another request wrote between a request's check and its write (as when an
admin adds one shape twice at the same moment, or two first webhooks of a project are set): a
409 in the error format, nothing of the request kept, rather than a 500."""
from __future__ import annotations

from sqlalchemy import func, select

from gpu_tenancy import error_codes as codes
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine import catalog
from tests.conftest import headers

ADMIN = headers("ml-vision", "admin")
SHAPE = {"name": "a100.x3", "gpu_model": "A100", "gpus": 3, "vcpus": 36, "ram_mb": 368640, "disk_gb": 150,
         "pci_alias": "a100"}


def counts(sessions) -> tuple[int, int]:
    with session_scope(sessions) as s:
        return (s.scalar(select(func.count()).select_from(m.Shape)),
                s.scalar(select(func.count()).select_from(m.AuditRecord)))


def test_a_shape_made_meanwhile_by_another_request_is_a_409(client, sessions, monkeypatch):
    assert client.post("/v1/shapes", json=SHAPE, headers=ADMIN).status_code == 201
    before = counts(sessions)
    monkeypatch.setattr(catalog, "cast", lambda kind, found: None)   # the check read before the other's commit
    reply = client.post("/v1/shapes", json=SHAPE, headers=ADMIN)
    assert reply.status_code == 409, reply.get_json()
    error = reply.get_json()["errors"][0]
    assert error["code"] == codes.CONFLICT and "ask again" in error["detail"] and error["request_id"]
    assert counts(sessions) == before

"""`openstack gpu lease resume`: finds the lease by id or name and POSTs .../resume; the
API's refusal (a lease not parked) is the command's error."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from gpu_tenancy.osc.client import ApiError, GpuClient  # noqa: E402
from gpu_tenancy.osc.lease_resume import ResumeLease  # noqa: E402
from tests.unit.test_osc_lease_done import LEASE, Response  # noqa: E402

PARK = {"parked_at": "2026-12-01T08:00:00Z", "resume_by": "2026-12-01T09:00:00Z", "remaining": 3600}


class Http:
    def __init__(self, parked: bool = True):
        self.sent: list[tuple[str, str, object]] = []
        self.parked = parked

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        self.sent.append((method, path, json))
        if path == "/v1/leases/train":
            return Response(404, {"errors": [{"status": 404, "code": "gpu_tenancy.lease_not_found",
                                               "detail": "lease 'train' not found"}]})
        if path == "/v1/leases":
            return Response(200, {"leases": [LEASE]})
        if not self.parked:
            return Response(409, {"errors": [{"status": 409, "code": "gpu_tenancy.lease_not_parked",
                                               "detail": "lease is active; only a parked lease can be resumed"}]})
        return Response(200, {"lease": {**LEASE, "status": "parked", "park": PARK}})


def run(http, *argv):
    command = ResumeLease(SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "p"))),
                          argparse.Namespace())
    return command.take_action(command.get_parser("openstack gpu lease resume").parse_args(argv))


def test_resume_by_name_posts_to_the_leases_resume_and_shows_its_slot():
    http = Http()
    columns, values = run(http, "train")
    shown = dict(zip(columns, values))
    assert shown["status"] == "parked" and "2026-12-01T09:00:00Z" in str(shown["park"])
    assert http.sent[-1] == ("POST", f"/v1/leases/{LEASE['id']}/resume", None)


def test_a_lease_not_parked_is_the_commands_error():
    with pytest.raises(ApiError, match="only a parked lease can be resumed"):
        run(Http(parked=False), LEASE["id"])

"""`openstack gpu lease done`: finds the lease by id or name and POSTs .../done, with
the detail when given; the API's refusal (a lease not running) is the command's error."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from gpu_tenancy.osc.client import ApiError, GpuClient  # noqa: E402
from gpu_tenancy.osc.lease_done import DoneLease  # noqa: E402

LEASE = {"id": "8d3f0c5e-0000-4000-8000-000000000001", "name": "train", "status": "active"}


class Http:
    """The keystoneauth adapter, answering as the API would."""

    def __init__(self, done_status: int = 200):
        self.sent: list[tuple[str, str, object]] = []
        self.done_status = done_status

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        self.sent.append((method, path, json))
        if path == "/v1/leases/train":
            return Response(404, {"errors": [{"status": 404, "code": "gpu_tenancy.lease_not_found",
                                               "detail": "lease 'train' not found"}]})
        if path == "/v1/leases":
            return Response(200, {"leases": [LEASE]})
        if path.endswith("/done") and self.done_status != 200:
            return Response(409, {"errors": [{"status": 409, "code": "gpu_tenancy.lease_not_running",
                                               "detail": "lease is queued; only a running lease can be done"}]})
        return Response(200, {"lease": {"id": LEASE["id"], "status": "ending", "end": "2026-12-01T09:00:00Z"}})


class Response:
    def __init__(self, status_code, body):
        import json
        self.status_code, self._body = status_code, body
        self.text = self.content = json.dumps(body)

    def json(self):
        return self._body


def run(http, *argv):
    command = DoneLease(SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "p"))),
                        argparse.Namespace())
    return command.take_action(command.get_parser("openstack gpu lease done").parse_args(argv))


def test_done_by_name_with_a_detail_posts_to_the_leases_done():
    http = Http()
    columns, values = run(http, "train", "--detail", "exit 0")
    assert dict(zip(columns, values))["status"] == "ending"
    assert http.sent[-1] == ("POST", f"/v1/leases/{LEASE['id']}/done", {"detail": "exit 0"})


def test_a_lease_not_running_is_the_commands_error():
    with pytest.raises(ApiError, match="only a running lease can be done"):
        run(Http(done_status=409), LEASE["id"])

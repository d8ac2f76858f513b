"""`openstack gpu lease done` and `openstack gpu lease resume`: each finds the lease by id or
name and POSTs .../done (with the detail when given) or .../resume; the API's refusal (a
lease not running, not parked) is the command's error."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from gpu_tenancy.osc.client import ApiError, GpuClient  # noqa: E402
from gpu_tenancy.osc.lease_done import DoneLease  # noqa: E402
from gpu_tenancy.osc.lease_resume import ResumeLease  # noqa: E402

LEASE = {"id": "8d3f0c5e-0000-4000-8000-000000000001", "name": "train", "status": "active"}
PARK = {"parked_at": "2026-12-01T08:00:00Z", "resume_by": "2026-12-01T09:00:00Z", "remaining": 3600}


@dataclass(frozen=True)
class Action:
    command: type
    path: str                  # after /v1/leases/<id>/
    options: tuple[str, ...]   # given after the lease
    body: dict | None          # POSTed
    answer: dict               # the lease as the API answers
    shown: tuple[str, str]     # a column shown, and a text in it
    refusal: tuple[str, str]   # the API's 409: its code and detail


DONE = Action(DoneLease, "done", ("--detail", "exit 0"), {"detail": "exit 0"},
              {"id": LEASE["id"], "status": "ending", "end": "2026-12-01T09:00:00Z"}, ("end", "2026-12-01T09:00:00Z"),
              ("gpu_tenancy.lease_not_running", "lease is queued; only a running lease can be done"))
RESUME = Action(ResumeLease, "resume", (), None, {**LEASE, "status": "parked", "park": PARK},
                ("park", "2026-12-01T09:00:00Z"),
                ("gpu_tenancy.lease_not_parked", "lease is active; only a parked lease can be resumed"))
ACTIONS = pytest.mark.parametrize("action", [DONE, RESUME], ids=["done", "resume"])


class Response:
    def __init__(self, status_code, body):
        self.status_code, self._body = status_code, body
        self.text = self.content = json.dumps(body)

    def json(self):
        return self._body


class Http:
    """The keystoneauth adapter, answering as the API would."""

    def __init__(self, action: Action, refuse: bool = False):
        self.sent: list[tuple[str, str, object]] = []
        self.action, self.refuse = action, refuse

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        self.sent.append((method, path, json))
        if path == "/v1/leases/train":
            return Response(404, {"errors": [{"status": 404, "code": "gpu_tenancy.lease_not_found",
                                               "detail": "lease 'train' not found"}]})
        if path == "/v1/leases":
            return Response(200, {"leases": [LEASE]})
        if self.refuse and path.endswith("/" + self.action.path):
            code, detail = self.action.refusal
            return Response(409, {"errors": [{"status": 409, "code": code, "detail": detail}]})
        return Response(200, {"lease": self.action.answer})


def run(http: Http, *argv):
    action = http.action
    command = action.command(SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "p"))),
                             argparse.Namespace())
    return command.take_action(command.get_parser(f"openstack gpu lease {action.path}").parse_args(argv))


@ACTIONS
def test_by_name_posts_to_the_leases_action_and_shows_the_answer(action):
    http = Http(action)
    columns, values = run(http, "train", *action.options)
    shown = dict(zip(columns, values))
    column, text = action.shown
    assert shown["status"] == action.answer["status"] and text in str(shown[column])
    assert http.sent[-1] == ("POST", f"/v1/leases/{LEASE['id']}/{action.path}", action.body)


@ACTIONS
def test_the_apis_refusal_is_the_commands_error(action):
    with pytest.raises(ApiError, match=action.refusal[1].split("; ")[1]):
        run(Http(action, refuse=True), LEASE["id"])

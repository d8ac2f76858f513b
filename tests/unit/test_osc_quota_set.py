"""`openstack gpu quota set`: the limits given change and no other, even when another admin
changes the same project's quota while the command runs."""
from __future__ import annotations

import argparse
import copy
from types import SimpleNamespace

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from gpu_tenancy.osc.client import GpuClient  # noqa: E402
from gpu_tenancy.osc.quota import SetQuota  # noqa: E402
from tests.unit.test_osc_lease_actions import Response  # noqa: E402


class Http:
    """The API's quotas of one project; `between` is another admin's change, committed just
    after this command's first request is answered. `patch`: whether the API knows PATCH."""

    def __init__(self, between: dict, patch: bool = True):
        self.limits = {"A100": {"gpus": 8, "borrow_gpus": 0, "max_duration": None, "weight": 1.0}}
        self.between, self.patch, self.sent = between, patch, []

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        self.sent.append(method)
        answer = self.answer(method, json)
        if len(self.sent) == 1:
            self.limits["A100"].update(self.between)
        return answer

    def answer(self, method, body):
        if method == "PATCH" and not self.patch:
            return Response(405, {"errors": [{"status": 405, "detail": "method not allowed"}]})
        for model, given in ((body or {}).get("quota", {}).get("gpu_models") or {}).items():
            self.limits[model] = {**self.limits[model], **given} if method == "PATCH" else given
        return Response(200, {"quota": {"project_id": "p", "gpu_models": copy.deepcopy(self.limits)}})


def quota_set(http: Http, *argv):
    command = SetQuota(SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "p"))),
                       argparse.Namespace())
    return command.take_action(command.get_parser("openstack gpu quota set").parse_args(["p", *argv]))


def test_another_admins_change_made_meanwhile_is_kept():
    """It read the limits and PUT them back with its change: another admin's --gpus 16,
    committed between the read and the write, was undone by a --weight 2."""
    http = Http(between={"gpus": 16})
    quota_set(http, "--gpu-model", "A100", "--weight", "2")
    assert http.limits["A100"] == {"gpus": 16, "borrow_gpus": 0, "max_duration": None, "weight": 2.0}
    assert http.sent == ["PATCH"]


def test_a_service_without_patch_is_still_set_by_read_then_write():
    http = Http(between={}, patch=False)
    quota_set(http, "--gpu-model", "A100", "--weight", "2")
    assert http.limits["A100"] == {"gpus": 8, "borrow_gpus": 0, "max_duration": None, "weight": 2.0}
    assert http.sent == ["PATCH", "GET", "PUT"]

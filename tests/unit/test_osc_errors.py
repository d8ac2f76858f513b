"""The CLI's one-line error: the API-WG body when there is one, the status and text when not."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from gpu_tenancy.osc.client import error_message  # noqa: E402


class Response:
    def __init__(self, status_code: int, text: str):
        self.status_code, self.text = status_code, text

    def json(self):
        return json.loads(self.text)


def test_an_api_wg_error_reads_as_its_detail_then_status_code_and_request_id():
    body = {"errors": [{"status": 409, "code": "gpu_tenancy.extension_conflict", "title": "Conflict",
                        "detail": "the extension would delay lease 42", "request_id": "req-1"}]}
    assert error_message(Response(409, json.dumps(body))) == (
        "the extension would delay lease 42 (HTTP 409, gpu_tenancy.extension_conflict, request req-1)")


def test_a_body_of_another_form_keeps_the_status_and_its_text():
    assert error_message(Response(502, "<html>Bad Gateway</html>")) == (
        "HTTP 502 from gpu-tenancy: <html>Bad Gateway</html>")
    assert error_message(Response(500, "")) == "HTTP 500 from gpu-tenancy"
    assert error_message(Response(400, '{"errors": []}')) == 'HTTP 400 from gpu-tenancy: {"errors": []}'

"""The CLI's one-line error: the API-WG body when there is one, the status and text when not."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from osc_lib import exceptions  # noqa: E402

from gpu_tenancy.osc.client import GpuClient, error_message  # noqa: E402


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


def test_an_error_carries_no_terminal_controls():
    """OSC prints the message raw on stderr: a detail that quotes what a tenant wrote, or a
    proxy's page, wrote its escape sequences to the terminal."""
    body = {"errors": [{"status": 409, "detail": "lease 'x\u009b2J\x1b]52;c;aGk=\x07' is queued"}]}
    assert error_message(Response(409, json.dumps(body))) == (
        "lease 'x\\x9b2J\\x1b]52;c;aGk=\\x07' is queued (HTTP 409)")
    assert error_message(Response(502, "bad\x1b[2J\r\ngateway")) == (
        "HTTP 502 from gpu-tenancy: bad\\x1b[2J\\r\\ngateway")


class Http:
    """The keystoneauth adapter, answering 200 with what a proxy's login page or another
    service would send."""

    def __init__(self, text: str, content_type: str):
        self.text, self.content_type = text, content_type

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        response = Response(200, self.text)
        response.content, response.headers = self.text.encode(), {"Content-Type": self.content_type}
        return response


@pytest.mark.parametrize("text, content_type", [("<html><body>Sign in</body></html>", "text/html"),
                                                ('{"versions": {"values": []}}', "application/json")])
def test_an_answer_that_is_not_the_apis_is_a_clear_error(text, content_type):
    """An endpoint that is not gpu-tenancy's (a proxy's login page, the dashboard) answered
    200 with HTML: every command said only "Expecting value: line 1 column 1 (char 0)"; the
    version document of another service at the endpoint, only "'capacity'"."""
    client = GpuClient(Http(text, content_type), "p")
    with pytest.raises(exceptions.CommandError, match="is the endpoint gpu-tenancy's API") as error:
        client.capacity()
    assert content_type in str(error.value) and text[:20] in str(error.value)

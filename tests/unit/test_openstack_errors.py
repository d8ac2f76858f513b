"""How the openstack driver classifies cloud errors: real openstacksdk
exceptions, made from HTTP responses the way the SDK makes them."""
from __future__ import annotations

import json

import pytest
import requests
from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk

from gpu_tenancy.cloud.openstack.errors import classify, cloud_message, wrap
from gpu_tenancy.domain.failures import FailureClass as F


def sdk_error(status: int, body: dict) -> sdk.HttpException:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode()
    response.headers["Content-Type"] = "application/json"
    response.headers["x-openstack-request-id"] = "req-1"
    response.url = "http://127.0.0.1:8774/v2.1/servers"
    try:
        sdk.raise_from_response(response)
    except sdk.HttpException as exc:
        return exc
    raise AssertionError("raise_from_response did not raise")


@pytest.mark.parametrize("status, body, about, expected", [
    (403, {"forbidden": {"message": "Quota exceeded for instances: Requested 1, but already used 0 of 0 "
                                    "instances", "code": 403}}, None, F.NOVA_QUOTA),
    (403, {"forbidden": {"message": "Policy doesn't allow compute:servers:create:requested_destination "
                                    "to be performed.", "code": 403}}, None, F.FORBIDDEN),
    (404, {"itemNotFound": {"message": "Volume abc could not be found.", "code": 404}}, F.VOLUME, F.VOLUME),
    (404, {"itemNotFound": {"message": "Image abc could not be found.", "code": 404}}, None, F.IMAGE),
    (400, {"badRequest": {"message": "Invalid volume: volume abc is in-use", "code": 400}}, None, F.VOLUME),
    (500, {"computeFault": {"message": "Unexpected API Error.", "code": 500}}, None, F.API_ERROR),
    (409, {"conflictingRequest": {"message": "Flavor with name gt-x already exists.", "code": 409}}, None,
     F.API_ERROR),
])
def test_http_errors_get_their_class_and_keep_the_clouds_words(status, body, about, expected):
    exc = sdk_error(status, body)
    assert classify(exc, about) == expected
    words = next(iter(body.values()))["message"]
    assert words in cloud_message(exc) and f"HTTP {status}" in cloud_message(exc)
    wrapped = wrap(exc, "our message", about)
    assert (wrapped.failure_class, wrapped.message) == (expected, "our message")
    assert words in wrapped.cloud_message


def test_an_unreachable_cloud_or_refused_credentials_are_classified():
    assert classify(ksa.ConnectFailure("Unable to establish connection to http://127.0.0.1:8774")) == F.API_ERROR
    assert classify(ksa.Unauthorized("The request you have made requires authentication.")) == F.FORBIDDEN
    assert classify(ksa.ConnectTimeout("timed out")) == F.API_ERROR

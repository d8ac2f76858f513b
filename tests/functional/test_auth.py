"""Under keystone auth (keystonemiddleware), requests without a valid token are
refused in the API's own error form, and identity headers sent by the caller
are not trusted. (Tokens from a real Keystone are tested with the loopback cloud.)"""
from __future__ import annotations

import pytest

from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config


@pytest.fixture
def keystone_client(db_url, clock, cloud):
    config = Config.load(database_url=db_url, auth_strategy="keystone", run_engine=False,
                         keystone_authtoken={"www_authenticate_uri": "http://127.0.0.1:5000/v3"})
    return create_app(config, clock=clock, cloud=cloud).test_client()


@pytest.mark.parametrize("extra", [{}, {"X-Project-Id": "ml-vision", "X-Roles": "admin", "X-User-Id": "mallory",
                                        "X-Identity-Status": "Confirmed"}])
def test_no_token_or_forged_identity_gets_401(keystone_client, extra):
    response = keystone_client.get("/v1/leases", headers=extra)
    assert response.status_code == 401
    error = response.get_json()["errors"][0]
    assert error["status"] == 401 and error["code"] == "gpu_tenancy.unauthenticated"
    assert error["request_id"] == response.headers["X-OpenStack-Request-Id"]
    assert 'uri="http://127.0.0.1:5000/v3"' in response.headers["WWW-Authenticate"]


def test_version_document_and_health_need_no_token(keystone_client):
    assert keystone_client.get("/").get_json()["versions"][0]["id"] == "v1.0"
    assert keystone_client.get("/healthz").status_code == 200


def test_noauth2_without_a_project_is_401(client):
    response = client.get("/v1/leases")
    assert response.status_code == 401
    assert response.get_json()["errors"][0]["code"] == "gpu_tenancy.unauthenticated"

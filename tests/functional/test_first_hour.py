"""A newcomer's first hour (issue 19): each trap a new user hit, as a test that failed before."""
from __future__ import annotations


def test_the_dashboard_address_the_banner_prints_leads_to_the_login_not_a_json_401(client):
    """Trap 1: /dashboard (no slash) answered a raw JSON 401; now it redirects to /dashboard/,
    which sends a visitor without a session to the login page."""
    bare = client.get("/dashboard")
    assert bare.status_code in (301, 308) and bare.headers["Location"].endswith("/dashboard/")
    page = client.get("/dashboard", follow_redirects=True)
    assert page.status_code == 200 and b"<form" in page.data and b"login" in page.data.lower()
    api = client.get("/v1/leases")   # the API still answers 401 in its own form
    assert api.status_code == 401 and api.get_json()["errors"][0]["code"] == "gpu_tenancy.unauthenticated"

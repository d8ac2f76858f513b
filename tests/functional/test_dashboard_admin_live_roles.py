"""The dashboard's admin pages that read the database themselves (figures, exports) are
for whoever the API takes for an admin now, on the login's live token: not for the roles
Keystone gave the login when it began (an admin role removed since, which Keystone's
validation of the same token no longer shows, opens nothing)."""
from __future__ import annotations

from cryptography.fernet import Fernet

from gpu_tenancy.dashboard import keystone_login
from tests.conftest import headers
from tests.functional.test_exposure import SCOPED, UNSCOPED, keystone, keystone_app, keystone_login_as_alice  # noqa: F401  (keystone: a fixture)

NLP = headers("nlp-lab", "member", user="carol")


def test_an_admin_role_removed_since_the_login_opens_no_export_of_every_project(
        client, db_url, clock, cloud, keystone, monkeypatch):
    # another project's lease, asked for through the API (the noauth2 app on the same database)
    theirs = client.post("/v1/leases", json={"shape": "a100.x1", "duration": "PT1H", "name": "their-secret-run"},
                         headers=NLP)
    assert theirs.status_code == 201, theirs.text
    # at the login Keystone said alice was an admin of ml-vision; the role is gone since: Keystone's
    # validation of the same token (FakeKeystone, as keystonemiddleware sees it) says member, reader
    monkeypatch.setattr(keystone_login, "scope_to", lambda url, token, project: keystone_login.Scoped(
        SCOPED if token == UNSCOPED else "wrong", project, project, ["admin", "member", "reader"], 4_000_000_000))
    dashboard = keystone_app(db_url, clock, cloud, [Fernet.generate_key().decode()]).test_client()
    keystone_login_as_alice(dashboard)
    # the API refuses her every project's leases on that token
    assert dashboard.get("/v1/leases?all_projects=true", headers={"X-Auth-Token": SCOPED}).status_code == 403
    for path in ("/dashboard/admin/export/leases.csv", "/dashboard/admin/export/events.json",
                 "/dashboard/admin/export/usage.csv", "/dashboard/admin/figures"):
        page = dashboard.get(path)
        assert page.status_code == 403, (path, page.status_code)
        assert "their-secret-run" not in page.get_data(as_text=True)
        assert theirs.json["lease"]["id"] not in page.get_data(as_text=True)

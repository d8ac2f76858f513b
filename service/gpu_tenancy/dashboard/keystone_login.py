"""Keystone for the dashboard (keystoneauth1): a password gives an unscoped
token and the user's projects; a project gives a project-scoped token; logout
revokes both."""
from __future__ import annotations

from dataclasses import dataclass

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

TIMEOUT = 30


class LoginFailed(Exception):
    """Keystone refused, or could not be reached; the message is for the user."""


@dataclass
class Scoped:
    token: str
    project_id: str
    project_name: str
    roles: list[str]
    expires_at: int


@dataclass
class Unscoped:
    token: str
    user_id: str
    user_name: str
    projects: list[dict]   # [{"id", "name"}]
    expires_at: int


def _session(auth=None) -> ks_session.Session:
    return ks_session.Session(auth=auth, timeout=TIMEOUT)


def password_login(auth_url: str, username: str, password: str, domain: str) -> Unscoped:
    auth = v3.Password(auth_url=auth_url, username=username, password=password,
                       user_domain_name=domain, unscoped=True)
    sess = _session(auth)
    try:
        access = auth.get_access(sess)
        listed = sess.get(auth_url.rstrip("/") + "/auth/projects").json().get("projects", [])
    except ks_exc.Unauthorized:
        raise LoginFailed("the user name or the password is wrong") from None
    except ks_exc.ClientException as exc:
        raise LoginFailed(f"Keystone could not be reached: {type(exc).__name__}") from None
    # a token Keystone issued has these
    assert access.auth_token is not None and access.user_id is not None and access.username is not None
    assert access.expires is not None
    projects = sorted(({"id": p["id"], "name": p["name"]} for p in listed if p.get("enabled", True)),
                      key=lambda p: p["name"])
    return Unscoped(access.auth_token, access.user_id, access.username, projects, int(access.expires.timestamp()))


def scope_to(auth_url: str, unscoped_token: str, project_id: str) -> Scoped:
    auth = v3.Token(auth_url=auth_url, token=unscoped_token, project_id=project_id)
    try:
        access = auth.get_access(_session(auth))
    except ks_exc.Unauthorized:
        raise LoginFailed("Keystone gives no token for that project: the user has no role there") from None
    except ks_exc.ClientException as exc:
        raise LoginFailed(f"Keystone could not be reached: {type(exc).__name__}") from None
    # a project-scoped token Keystone issued has these
    assert access.auth_token is not None and access.project_id is not None and access.project_name is not None
    assert access.role_names is not None and access.expires is not None
    return Scoped(access.auth_token, access.project_id, access.project_name, list(access.role_names),
                  int(access.expires.timestamp()))


def revoke(auth_url: str, token: str) -> bool:
    """DELETE /v3/auth/tokens with the token as its own subject; True when
    Keystone confirms (a token already invalid is as good as revoked)."""
    try:
        _session().delete(auth_url.rstrip("/") + "/auth/tokens",
                          headers={"X-Auth-Token": token, "X-Subject-Token": token})
        return True
    except ks_exc.NotFound:
        return True
    except ks_exc.Unauthorized:
        return True
    except ks_exc.ClientException:
        return False

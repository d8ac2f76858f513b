"""Identity for each request: keystonemiddleware in production, noauth2 for
the demo and tests. Both leave the same X-Project-Id, X-User-Id, X-Roles and
X-Identity-Status headers; the app refuses unconfirmed identities itself, so
every 401 is in the API's own error form."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

# Keystone's default implied roles: admin implies member, member implies reader.
IMPLIED = {"admin": ("member", "reader"), "member": ("reader",)}


def expand_roles(roles: list[str]) -> list[str]:
    out = list(dict.fromkeys(r.strip() for r in roles if r.strip()))
    for role in list(out):
        for implied in IMPLIED.get(role, ()):
            if implied not in out:
                out.append(implied)
    return out


class NoAuth2:
    """Trust the identity headers as given (as Placement's noauth2 does). Never in production.

    A client that can send only a token (python-blazarclient with auth type admin_token)
    gives the same identity as the token "<project>:<user>[:<role>,<role>...]"."""

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        token = environ.get("HTTP_X_AUTH_TOKEN", "")
        if not environ.get("HTTP_X_PROJECT_ID") and token.count(":") in (1, 2):
            project, user, *roles = token.split(":")
            if project and user:
                environ.update(HTTP_X_PROJECT_ID=project, HTTP_X_USER_ID=user,
                               HTTP_X_ROLES=roles[0] if roles else "member")
        if environ.get("HTTP_X_PROJECT_ID"):
            roles = expand_roles(environ.get("HTTP_X_ROLES", "").split(","))
            environ["HTTP_X_ROLES"] = ",".join(roles)
            environ.setdefault("HTTP_X_USER_ID", "noauth-user")
            environ["HTTP_X_IDENTITY_STATUS"] = "Confirmed"
        else:
            environ["HTTP_X_IDENTITY_STATUS"] = "Invalid"
        return self.app(environ, start_response)


def keystone(app: WSGIApplication, options: dict) -> Any:
    """keystonemiddleware's auth_token, deciding late so the app answers 401 in its own form."""
    from keystonemiddleware import auth_token
    conf = {"delay_auth_decision": True, **options}
    return auth_token.AuthProtocol(app, conf)

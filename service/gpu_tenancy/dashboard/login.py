"""Who is logged in to the dashboard: Keystone (user and password, then the
project) or, with auth_strategy noauth2 only, a dev login that takes the
identity as typed. The login lives in a server-side row; the cookie holds its id."""
from __future__ import annotations

import hmac
import re
import secrets
from urllib.parse import urlsplit

from flask import abort, g, make_response, redirect, render_template, request, url_for

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.auth import expand_roles
from gpu_tenancy.dashboard import bp, keystone_login
from gpu_tenancy.dashboard.api_client import ApiClient, ApiError
from gpu_tenancy.engine import web_sessions

COOKIE = "gt_dashboard"
LOGIN_CSRF_COOKIE = "gt_dashboard_login"
OPEN_ENDPOINTS = {"dashboard.login", "dashboard.static"}
IDENTIFIER = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
DEV_ROLES = ("reader", "member", "admin")


def dev_mode() -> bool:
    return rt.runtime().config.auth_strategy == "noauth2"


def keystone_url() -> str:
    cfg = rt.runtime().config
    url = cfg.dashboard_keystone_url or cfg.keystone_authtoken.get("www_authenticate_uri") \
        or cfg.keystone_authtoken.get("auth_url")
    if not url:
        abort(500, "the dashboard needs dashboard_keystone_url (or keystone_authtoken's www_authenticate_uri)")
    return url


def token_seal() -> web_sessions.TokenSeal:
    runtime = rt.runtime()
    seal = runtime.extras.get("token_seal")
    if seal is None:
        seal = runtime.extras["token_seal"] = web_sessions.TokenSeal(runtime.config.dashboard_token_keys)
    return seal


def api() -> ApiClient:
    """The API as the logged-in user."""
    login = g.login
    if login.dev_mode:
        return ApiClient({"X-Project-Id": login.project_id, "X-User-Id": login.user_id,
                          "X-Roles": ",".join(login.roles)})
    return ApiClient({"X-Auth-Token": g.tokens.scoped})


def is_admin() -> bool:
    return "admin" in (g.login.roles or [])


def cookie_secure() -> bool:
    return request.is_secure or rt.runtime().config.dashboard_cookie_secure


@bp.before_request
def _load_login():
    with rt.transaction() as session:
        login = web_sessions.find(session, rt.now(), request.cookies.get(COOKIE))
        # a dev login means nothing once the service runs with Keystone (and the other way round)
        if login is not None and login.dev_mode != dev_mode():
            login = None
        try:
            g.tokens = token_seal().open(login) if login is not None else None
        except web_sessions.TokensUnreadable:   # sealed with a dropped key, or older than sealing
            web_sessions.close(session, request.cookies[COOKIE])
            login = None
    g.login = login
    if g.login is None and request.endpoint not in OPEN_ENDPOINTS:
        back = request.full_path.rstrip("?") if request.method == "GET" else None
        return redirect(url_for("dashboard.login", next=back))
    if request.method == "POST" and request.endpoint != "dashboard.login":
        sent = request.form.get("csrf_token", "")
        if not hmac.compare_digest(sent.encode(), g.login.csrf_token.encode()):
            abort(400, "the form's CSRF token is missing or stale: reload the page and try again")
    return None


# Nothing comes from elsewhere; the one script is the dashboard's own file (local times
# beside UTC, static/localtime.js: the pages read the same without it), no inline script;
# inline style attributes (bar widths) are the one other allowance.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@bp.after_request
def _security_headers(response):
    for name, value in SECURITY_HEADERS.items():
        if name != "Cache-Control" or request.endpoint != "dashboard.static":
            response.headers.setdefault(name, value)
    return response


@bp.app_template_global()
def csrf_token() -> str:
    return g.login.csrf_token if g.get("login") else request.cookies.get(LOGIN_CSRF_COOKIE, "")


def flash(message: str, kind: str = "ok") -> None:
    """Tell the user on the next page (kept in the login row: no client-side session)."""
    with rt.transaction() as session:
        web_sessions.add_notice(session, request.cookies[COOKIE], kind, message)


def notices() -> list[list[str]]:
    if not g.get("login"):
        return []
    with rt.transaction() as session:
        return web_sessions.take_notices(session, request.cookies[COOKIE])


@bp.app_context_processor
def _chrome():
    cfg = rt.runtime().config
    return {"login": g.get("login"), "dev_mode": dev_mode(), "horizon_url": cfg.dashboard_horizon_url,
            "notices": notices, "is_admin": bool(g.get("login")) and is_admin()}


def safe_next(target: str | None) -> str:
    """Only a path of this dashboard: never an open redirect, nor a control character (a CR
    or LF would split the Location header, which werkzeug refuses with a 500)."""
    if (target and target.startswith("/dashboard") and not urlsplit(target).netloc and "\\" not in target
            and not any(ord(c) < 0x20 or c == "\x7f" for c in target)):
        return target
    return url_for("dashboard.leases")


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if not dev_mode() and not token_seal().ready:
        abort(503, "the dashboard's Keystone login is off: the service has no dashboard_token_keys "
                   "to keep tokens sealed (see the README, Security)")
    if request.method == "POST":
        expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
        if not expected or not hmac.compare_digest(request.form.get("csrf_token", "").encode(), expected.encode()):
            error = "the login form was stale: try again"
        else:
            try:
                session_id = dev_login() if dev_mode() else password_login()
            except (keystone_login.LoginFailed, ValueError) as exc:
                error = str(exc)
            else:
                if g.login is not None:  # a new login replaces the one this browser had
                    end_login(g.login)
                response = redirect(safe_next(request.args.get("next")))
                response.set_cookie(COOKIE, session_id, httponly=True, secure=cookie_secure(), samesite="Lax",
                                    path="/dashboard")
                response.delete_cookie(LOGIN_CSRF_COOKIE, path="/dashboard")
                return response
    g.login = None  # the login page is outside any login: no project switcher, no logout
    token = secrets.token_urlsafe(32)
    response = make_response(render_template("dashboard/login.html", error=error, csrf=token, roles=DEV_ROLES,
                                            form=request.form), 400 if error else 200)
    response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, secure=cookie_secure(), samesite="Strict",
                        path="/dashboard")
    return response


def checked(name: str, value: str) -> str:
    value = value.strip()
    if not IDENTIFIER.match(value):
        raise ValueError(f"{name}: letters, digits and . _ @ - only, 1 to 64 of them")
    return value


def dev_login() -> str:
    project = checked("project", request.form.get("project", ""))
    user = checked("user", request.form.get("user", ""))
    roles = [r for r in DEV_ROLES if request.form.get(f"role_{r}")]
    if not roles:
        raise ValueError("pick at least one role")
    cfg = rt.runtime().config
    with rt.transaction() as session:
        session_id, _ = web_sessions.open_session(
            session, rt.now(), cfg.dashboard_session_seconds, user_id=user, user_name=user, project_id=project,
            project_name=project, roles=expand_roles(roles), projects=[{"id": project, "name": project}],
            dev_mode=True)
    return session_id


def password_login() -> str:
    username, password = request.form.get("username", "").strip(), request.form.get("password", "")
    if not username or not password:
        raise ValueError("give the user name and the password")
    url = keystone_url()
    cfg = rt.runtime().config
    unscoped = keystone_login.password_login(url, username, password, request.form.get("domain") or "Default")
    if not unscoped.projects:
        keystone_login.revoke(url, unscoped.token)
        raise keystone_login.LoginFailed("the user has a role in no project")
    wanted = request.form.get("project", "").strip()
    chosen = next((p for p in unscoped.projects if wanted in (p["id"], p["name"])), None)
    if chosen is None and wanted:
        keystone_login.revoke(url, unscoped.token)
        raise keystone_login.LoginFailed(f"you have no role in a project named {wanted[:64]!r}")
    try:
        scoped = keystone_login.scope_to(url, unscoped.token, (chosen or unscoped.projects[0])["id"])
    except keystone_login.LoginFailed:
        keystone_login.revoke(url, unscoped.token)
        raise
    with rt.transaction() as session:
        session_id, _ = web_sessions.open_session(
            session, rt.now(), cfg.dashboard_session_seconds, user_id=unscoped.user_id,
            user_name=unscoped.user_name, project_id=scoped.project_id, project_name=scoped.project_name,
            roles=scoped.roles, projects=unscoped.projects, token=token_seal().seal(scoped.token),
            unscoped_token=token_seal().seal(unscoped.token),
            dev_mode=False, expires_at=min(scoped.expires_at, unscoped.expires_at))
    return session_id


def end_login(login) -> None:
    """Revoke the login's Keystone tokens and forget it."""
    if not login.dev_mode:
        url = keystone_url()
        for token in (g.tokens.scoped, g.tokens.unscoped):
            if token:
                keystone_login.revoke(url, token)
    with rt.transaction() as session:
        web_sessions.close(session, request.cookies[COOKIE])


@bp.post("/logout")
def logout():
    end_login(g.login)
    response = redirect(url_for("dashboard.login"))
    response.delete_cookie(COOKIE, path="/dashboard")
    return response


@bp.post("/project")
def switch_project():
    """The project switcher: a new project-scoped token (Keystone), or the new project as typed (dev)."""
    wanted = request.form.get("project_id", "").strip()
    with rt.transaction() as session:
        row = web_sessions.find(session, rt.now(), request.cookies.get(COOKIE))
        if row is None:   # it ended since this request's login check
            return redirect(url_for("dashboard.login"))
        if row.dev_mode:
            try:
                project = checked("project", wanted)
            except ValueError as exc:
                abort(400, str(exc))
            row.project_id = row.project_name = project
            if project not in [p["id"] for p in row.projects]:
                row.projects = [*row.projects, {"id": project, "name": project}]
        else:
            if wanted not in [p["id"] for p in row.projects]:
                abort(400, "not one of your projects")
            url = keystone_url()
            try:
                scoped = keystone_login.scope_to(url, g.tokens.unscoped, wanted)
            except keystone_login.LoginFailed as exc:
                abort(400, str(exc))
            keystone_login.revoke(url, g.tokens.scoped)
            row.token, row.project_id, row.project_name, row.roles = (
                token_seal().seal(scoped.token), scoped.project_id, scoped.project_name, scoped.roles)
    return redirect(safe_next(request.form.get("next")))


@bp.errorhandler(ApiError)
def _api_error(exc: ApiError):
    if exc.reply.status == 401:  # the token expired or was revoked elsewhere: log in again
        with rt.transaction() as session:
            web_sessions.close(session, request.cookies.get(COOKIE, ""))
        response = redirect(url_for("dashboard.login"))
        response.delete_cookie(COOKIE, path="/dashboard")
        return response
    return error_page(exc.reply.status, str(exc))


def error_page(status: int, message: str):
    return make_response(render_template("dashboard/error.html", status=status, message=message), status)


@bp.errorhandler(400)
@bp.errorhandler(403)
@bp.errorhandler(503)
@bp.errorhandler(404)
@bp.errorhandler(500)
def _http_error(exc):
    return error_page(exc.code, exc.description)

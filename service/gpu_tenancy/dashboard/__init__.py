"""The dashboard: server-rendered pages under /dashboard in the API's own app.
Pages ask the API in-process (api_client.py) for everything a tenant sees or
changes; the admin figures come from engine/reports.py."""
from __future__ import annotations

from flask import Blueprint

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard",
               template_folder="templates", static_folder="static", static_url_path="/static")

from gpu_tenancy.dashboard import admin, calendar_page, formatting, login, queue_page, tenant, whatif_page  # noqa: E402,F401  (routes, filters)

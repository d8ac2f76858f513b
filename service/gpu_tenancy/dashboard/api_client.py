"""The dashboard speaks to the API in-process: each call is a WSGI request
through the app's own stack (keystonemiddleware or noauth2, policy, handlers),
so what a page shows and what it may do is exactly what the API says."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flask import current_app, request
from werkzeug.datastructures import Headers
from werkzeug.test import EnvironBuilder, run_wsgi_app


@dataclass
class Reply:
    status: int
    body: Any
    content_type: str
    raw: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str:
        """The API's first error detail, for showing to the user."""
        if isinstance(self.body, dict) and self.body.get("errors"):
            return self.body["errors"][0].get("detail") or self.body["errors"][0].get("title", "")
        return f"the API answered {self.status}"


class ApiError(Exception):
    def __init__(self, reply: Reply):
        super().__init__(reply.error)
        self.reply = reply


class ApiClient:
    def __init__(self, identity_headers: dict[str, str]):
        self.headers = identity_headers

    def call(self, method: str, path: str, *, query: dict | None = None, body: Any = None) -> Reply:
        # The browser's address (as the trusted proxies gave it) and host carry over: the audit
        # record names the real client, and links in the API's answers point where the browser can follow.
        builder = EnvironBuilder(path=path, method=method, query_string=query, json=body, headers=Headers(self.headers),
                                 base_url=request.host_url, environ_overrides={"REMOTE_ADDR": request.remote_addr})
        environ = builder.get_environ()
        app = current_app._get_current_object()  # type: ignore[attr-defined]  # the proxy's own method
        # A fresh app context: the API request's g (request id, identity) stays its own.
        with app.app_context():
            chunks, status, headers = run_wsgi_app(app.wsgi_app, environ, buffered=True)
        raw = b"".join(chunks)
        content_type = headers.get("Content-Type", "")
        parsed = json.loads(raw) if raw and content_type.startswith("application/json") else None
        return Reply(int(status.split()[0]), parsed, content_type, raw)

    def get(self, path: str, **query) -> Any:
        """The body of a GET that must succeed; raises ApiError otherwise."""
        reply = self.call("GET", path, query={k: v for k, v in query.items() if v is not None})
        if not reply.ok:
            raise ApiError(reply)
        return reply.body

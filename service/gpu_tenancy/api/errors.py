"""Every error leaves the API in the OpenStack API-WG form:
{"errors": [{"status", "code", "title", "detail", "request_id"}]}."""
from __future__ import annotations

import logging

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed, RequestEntityTooLarge

from gpu_tenancy.api.blazar import errors as blazar_errors
from gpu_tenancy.errors import ServiceError, TooManyRequests

log = logging.getLogger(__name__)


def error_body(status: int, code: str, title: str, detail: str, request_id: str | None) -> dict:
    return {"errors": [{"status": status, "code": code, "title": title, "detail": detail,
                        "request_id": request_id}]}


def respond(status: int, code: str, title: str, detail: str) -> Response:
    response = jsonify(error_body(status, code, title, detail, g.get("request_id")))
    response.status_code = status
    return response


def blazar_path() -> bool:
    """The Blazar API's URL. Its blueprint's handlers answer the errors of its routes, but not
    those raised before a route matched (none did: the 401, a NUL in the query), nor those of
    a status the app has a handler of (Flask looks for the status first: 413)."""
    return request.path.startswith(blazar_errors.PREFIX)


def register(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(exc: ServiceError) -> Response:
        if blazar_path():
            return blazar_errors.blazar_error(exc.status, exc.detail)
        response = respond(exc.status, exc.code, exc.title, exc.detail)
        if isinstance(exc, TooManyRequests):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.errorhandler(RequestEntityTooLarge)
    def _too_large(exc: RequestEntityTooLarge) -> Response:
        detail = f"the request body is over the limit of {app.config['MAX_CONTENT_LENGTH'] // 1024} KiB"
        if blazar_path():
            return blazar_errors.blazar_error(413, detail)
        return respond(413, "gpu_tenancy.request_too_large", "Request Entity Too Large", detail)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        if blazar_path():   # no route matched, so no blueprint's handler
            return blazar_errors.http_error(exc)
        detail = exc.description or exc.name
        response = respond(exc.code or 500, f"gpu_tenancy.{(exc.name or 'error').lower().replace(' ', '_')}",
                           exc.name, detail)
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            response.headers["Allow"] = ", ".join(exc.valid_methods)
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unexpected error")
        return respond(500, "gpu_tenancy.internal", "Internal Server Error",
                       "an internal error occurred; the request id identifies it in the service log")

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


def register(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(exc: ServiceError) -> Response:
        response = respond(exc.status, exc.code, exc.title, exc.detail)
        if isinstance(exc, TooManyRequests):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.errorhandler(RequestEntityTooLarge)
    def _too_large(exc: RequestEntityTooLarge) -> Response:
        limit = app.config["MAX_CONTENT_LENGTH"] // 1024
        return respond(413, "gpu_tenancy.request_too_large", "Request Entity Too Large",
                       f"the request body is over the limit of {limit} KiB")

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        if request.path.startswith(blazar_errors.PREFIX):   # no route matched, so no blueprint's handler
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

"""Blazar's error body: {"error_code": 404, "error_message": "...", "error_name": 404}
(blazar/api/v1/utils.py: render_error_message), which blazarclient reads; the
request id stays in the X-OpenStack-Request-Id header."""
from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from gpu_tenancy.errors import ServiceError

log = logging.getLogger(__name__)
PREFIX = "/reservation/"   # its routes' prefix (leases.py): a URL or method none of them takes answers here too


def blazar_error(status: int, message: str) -> Response:
    response = jsonify({"error_code": status, "error_message": message, "error_name": status})
    response.status_code = status
    return response


def http_error(exc: HTTPException) -> Response:
    response = blazar_error(exc.code or 500, exc.description or exc.name)
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        response.headers["Allow"] = ", ".join(exc.valid_methods)
    return response


def register(bp: Blueprint) -> None:
    @bp.errorhandler(ServiceError)
    def _service_error(exc: ServiceError) -> Response:
        return blazar_error(exc.status, exc.detail)

    bp.register_error_handler(HTTPException, http_error)

    @bp.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unexpected error")
        return blazar_error(500, "Internal Server Error")

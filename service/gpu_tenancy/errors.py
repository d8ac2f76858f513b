"""Errors the service layer raises; the API renders them in the OpenStack
API-WG form. Each carries a message a user can act on."""
from __future__ import annotations


class ServiceError(Exception):
    status = 500
    title = "Internal Server Error"
    code = "gpu_tenancy.internal"

    def __init__(self, detail: str, code: str | None = None):
        super().__init__(detail)
        self.detail = detail
        if code:
            self.code = code


class BadRequest(ServiceError):
    status, title, code = 400, "Bad Request", "gpu_tenancy.bad_request"


class Unauthorized(ServiceError):
    status, title, code = 401, "Unauthorized", "gpu_tenancy.unauthorized"


class Forbidden(ServiceError):
    status, title, code = 403, "Forbidden", "gpu_tenancy.forbidden"


class NotFound(ServiceError):
    status, title, code = 404, "Not Found", "gpu_tenancy.not_found"


class Conflict(ServiceError):
    status, title, code = 409, "Conflict", "gpu_tenancy.conflict"


class ServiceUnavailable(ServiceError):
    status, title, code = 503, "Service Unavailable", "gpu_tenancy.cloud_unavailable"


class PayloadTooLarge(ServiceError):
    status, title, code = 413, "Request Entity Too Large", "gpu_tenancy.request_too_large"


class TooManyRequests(ServiceError):
    """Sent again too soon; `retry_after`: the seconds to wait (the Retry-After header)."""
    status, title, code = 429, "Too Many Requests", "gpu_tenancy.too_many_requests"

    def __init__(self, detail: str, retry_after: int, code: str | None = None):
        super().__init__(detail, code)
        self.retry_after = retry_after

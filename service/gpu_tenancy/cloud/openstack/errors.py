"""What an OpenStack API error means for a lease: its failure class, with the
cloud's own message kept beside ours."""
from __future__ import annotations

from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk

from gpu_tenancy.cloud.driver import CloudError
from gpu_tenancy.domain.failures import FailureClass

F = FailureClass


def cloud_message(exc: Exception) -> str:
    """The cloud's words: the API's error details when it sent any, with the HTTP status."""
    if isinstance(exc, sdk.HttpException):
        text = exc.details or exc.message or str(exc)
        return f"{text} (HTTP {exc.status_code})" if exc.status_code else text
    return str(exc) or type(exc).__name__


def is_unauthorized(exc: BaseException) -> bool:
    """Keystone refused the credentials or the scope (openstacksdk wraps keystoneauth's 401)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ksa.Unauthorized) or getattr(cause, "status_code", None) == 401:
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def classify(exc: Exception, about: F | None = None) -> F:
    """The failure class of an API error. `about` is the class to use when the
    error says only that the thing asked about was not found or is unusable
    (an image, a volume)."""
    text = cloud_message(exc).lower()
    if "no valid host" in text:
        return F.NO_VALID_HOST
    if "quota" in text and ("exceed" in text or "limit" in text):
        return F.NOVA_QUOTA
    if isinstance(exc, (sdk.ForbiddenException, ksa.Forbidden)):
        return F.FORBIDDEN
    if is_unauthorized(exc):
        return F.FORBIDDEN
    if isinstance(exc, (ksa.ConnectFailure, ksa.ConnectTimeout, ksa.DiscoveryFailure)):
        return F.API_ERROR
    if about is not None and isinstance(exc, (sdk.NotFoundException, sdk.BadRequestException,
                                              sdk.ConflictException)):
        return about
    if "image" in text and ("not found" in text or "could not be found" in text or "not active" in text):
        return F.IMAGE
    if "volume" in text:
        return F.VOLUME
    return F.API_ERROR


def wrap(exc: Exception, message: str, about: F | None = None) -> CloudError:
    return CloudError(classify(exc, about), message, cloud_message(exc))


CALL_ERRORS = (sdk.SDKException, ksa.ClientException)

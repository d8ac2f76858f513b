"""The failure taxonomy: one place for class, message, hint and retry rule."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class FailureClass(str, enum.Enum):
    NO_VALID_HOST = "no_valid_host"
    HOST_DOWN = "host_down"
    IMAGE = "image"
    KEY_PAIR = "key_pair"
    VOLUME = "volume"
    NOVA_QUOTA = "nova_quota"
    FORBIDDEN = "forbidden"
    BOOT_TIMEOUT = "boot_timeout"
    API_ERROR = "api_error"
    INTERNAL = "internal"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class FailureRule:
    user_message: str
    operator_hint: str
    retry_elsewhere: bool   # host-level: retry on another host with backoff
    max_attempts: int = 1


F = FailureClass
RULES: dict[FailureClass, FailureRule] = {
    F.NO_VALID_HOST: FailureRule(
        "the cloud found no host for the VM", "check Placement inventory and the PCI alias", True, 3),
    F.HOST_DOWN: FailureRule(
        "the host went down", "check nova-compute on the host", True, 3),
    F.IMAGE: FailureRule(
        "the image is missing or not active", "check the standard image catalog in Glance", False),
    F.KEY_PAIR: FailureRule(
        "the key pair named in the lease is not one of the user's key pairs", "none: the user names another", False),
    F.VOLUME: FailureRule(
        "the data volume could not be made or attached", "check Cinder and the project's volume quota", False),
    F.NOVA_QUOTA: FailureRule(
        "the project's cloud quota is exhausted", "raise the project's Nova quota", False),
    F.FORBIDDEN: FailureRule(
        "the cloud refused the request", "check the service user's roles on the project", False),
    F.BOOT_TIMEOUT: FailureRule(
        "the VM did not become active in time", "check nova-compute logs on the host", True, 2),
    F.API_ERROR: FailureRule(
        "a cloud API call failed", "check the cloud API's health", True, 3),
    F.INTERNAL: FailureRule(
        "an internal error in the service", "see the service log", False),
    F.UNKNOWN: FailureRule(
        "an unexpected error", "see the service log; this class is counted", False),
}


def rule(failure_class: FailureClass) -> FailureRule:
    return RULES[failure_class]

"""The failure taxonomy: one place for class, message, hint and retry rule.

Host-level faults (the host, its hypervisor, the cloud's API) are retried on
another host after a bounded, growing backoff; faults the user or the operator
must fix (image, key, volume, quota, roles) fail the lease at once. Anything
the engine cannot name is `unknown`: never retried, and counted apart so it
gets looked at.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class FailureClass(enum.StrEnum):
    NO_VALID_HOST = "no_valid_host"
    HOST_DOWN = "host_down"
    IMAGE = "image"
    KEY_PAIR = "key_pair"
    VOLUME = "volume"
    NETWORK = "network"
    NOVA_QUOTA = "nova_quota"
    FORBIDDEN = "forbidden"
    BOOT_TIMEOUT = "boot_timeout"
    API_ERROR = "api_error"
    INTERNAL = "internal"
    UNKNOWN = "unknown"


class Retry(enum.StrEnum):
    ELSEWHERE = "elsewhere"   # host-level: try another host after a backoff
    NEVER = "never"           # the user's or the operator's to fix: fail at once


@dataclass(frozen=True)
class FailureRule:
    user_message: str
    operator_hint: str
    retry: Retry
    max_attempts: int = 1     # attempts in all, the first one included

    @property
    def retry_elsewhere(self) -> bool:
        return self.retry is Retry.ELSEWHERE


F = FailureClass
E, N = Retry.ELSEWHERE, Retry.NEVER
RULES: dict[FailureClass, FailureRule] = {
    F.NO_VALID_HOST: FailureRule(
        "the cloud found no host for the VM", "check Placement inventory and the PCI alias", E, 3),
    F.HOST_DOWN: FailureRule(
        "the host went down", "check nova-compute on the host", E, 3),
    F.IMAGE: FailureRule(
        "the image is missing or not active", "check the standard image catalog in Glance", N),
    F.KEY_PAIR: FailureRule(
        "the key pair named in the lease is not one of the user's key pairs", "none: the user names another", N),
    F.VOLUME: FailureRule(
        "the data volume could not be made or attached", "check Cinder and the project's volume quota", N),
    F.NETWORK: FailureRule(
        "the lease's network could not be used or its floating IP could not be made",
        "check Neutron: the network, its router to the external network, the floating IP pool and quota", N),
    F.NOVA_QUOTA: FailureRule(
        "the project's cloud quota is exhausted", "raise the project's Nova quota", N),
    F.FORBIDDEN: FailureRule(
        "the cloud refused the request", "check the service user's roles on the project", N),
    F.BOOT_TIMEOUT: FailureRule(
        "the VM did not become active in time", "check nova-compute logs on the host", E, 2),
    F.API_ERROR: FailureRule(
        "a cloud API call failed", "check the cloud API's health", E, 3),
    F.INTERNAL: FailureRule(
        "an internal error in the service", "see the service log", N),
    F.UNKNOWN: FailureRule(
        "an unexpected error", "see the service log; this class is counted", N),
}

BACKOFF_FIRST_SECONDS = 30
BACKOFF_MAX_SECONDS = 600


def rule(failure_class: FailureClass) -> FailureRule:
    return RULES[failure_class]


def retry_delay(failure_class: FailureClass, attempt: int, first: int = BACKOFF_FIRST_SECONDS,
                cap: int = BACKOFF_MAX_SECONDS) -> int | None:
    """Seconds to wait before the next attempt after `attempt` attempts ended in this
    class, or None when the lease must fail now: doubling from `first`, at most `cap`."""
    r = rule(failure_class)
    if r.retry is Retry.NEVER or attempt >= r.max_attempts:
        return None
    return int(min(first * 2 ** (attempt - 1), cap))


def internal_error(exc: BaseException) -> str:
    """The failure message of a bug of ours, its text for operators: on one line and with no
    "; " in it, which ends it where a tenant's view cuts it out (api/lease_view.py: a text such
    as "timed out; dsn=..." was shown from its "; " on)."""
    return "internal error: " + " ".join(str(exc).split()).replace(";", ",")


def cloud_said(words: str | None) -> str:
    """The cloud's own words, after a message of ours: " (cloud said: ...)", or nothing
    when it said none. Operators read them; a tenant's view strips them (api/lease_view.py)."""
    return f" (cloud said: {words})" if words else ""


def classify_fault(fault: str) -> FailureClass:
    """The class of a Nova server fault message (a VM in ERROR)."""
    text = fault.lower()
    if "no valid host" in text:
        return F.NO_VALID_HOST
    if "quota" in text:
        return F.NOVA_QUOTA
    if "image" in text:
        return F.IMAGE
    if "volume" in text:
        return F.VOLUME
    if "host" in text and ("down" in text or "unavailable" in text):
        return F.HOST_DOWN
    if "timed out" in text or "timeout" in text:
        return F.BOOT_TIMEOUT
    return F.UNKNOWN

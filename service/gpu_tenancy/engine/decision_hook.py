"""An operator's decision service, asked before a lease is accepted, extended or
ended (as Blazar's external-service filter is), so billing systems can plug in.

It gets a POST with JSON {"action", "lease", "requested_by": {"user_id"}} and answers 204 to
allow or 403 to refuse, with a message for the user (JSON {"message": ...} or
plain text). Any other answer, an error or a time-out follows the configured
default, allow or deny.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import requests

from gpu_tenancy.config import Config
from gpu_tenancy.errors import Forbidden

log = logging.getLogger(__name__)
ACTIONS = ("accept", "extend", "end")
MAX_MESSAGE = 500


@dataclass(frozen=True)
class DecisionHook:
    url: str | None = None
    timeout: float = 5.0
    default_allow: bool = True

    @classmethod
    def from_config(cls, config: Config) -> "DecisionHook":
        return cls(config.decision_hook_url or None, config.decision_hook_timeout_seconds,
                   config.decision_hook_default == "allow")

    def ask(self, action: str, lease: dict, user_id: str | None) -> None:
        """Return when allowed; raise Forbidden (403) with the service's message when refused."""
        if not self.url:
            return
        if action not in ACTIONS:
            raise ValueError(f"unknown decision action {action!r}")
        body = {"action": action, "lease": lease, "requested_by": {"user_id": user_id}}
        try:
            response = requests.post(self.url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            return self._default(action, f"it could not be reached ({type(exc).__name__})")
        if response.status_code == 204:
            return None
        if response.status_code == 403:
            raise Forbidden(f"the {action} was refused by the operator's decision service: "
                            f"{message_of(response)}", "gpu_tenancy.refused_by_decision_service")
        return self._default(action, f"it answered {response.status_code}")

    def _default(self, action: str, what: str) -> None:
        log.warning("decision service %s: %s; %s by default", self.url, what,
                    "allowed" if self.default_allow else "refused")
        if not self.default_allow:
            raise Forbidden(f"the {action} was refused: the operator's decision service gave no answer "
                            f"({what}), and the default is to refuse", "gpu_tenancy.decision_service_unavailable")


def message_of(response: requests.Response) -> str:
    try:
        body = response.json()
        text = body.get("message") if isinstance(body, dict) else None
    except ValueError:
        text = None
    text = (text if isinstance(text, str) else response.text).strip() or "no reason given"
    text = "".join(c for c in text if c.isprintable())
    return text[:MAX_MESSAGE]

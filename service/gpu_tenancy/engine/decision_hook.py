"""An operator's decision service, asked before a lease is accepted, extended or
ended (as Blazar's external-service filter is), so billing systems can plug in.

It gets a POST with JSON {"action", "lease", "requested_by": {"user_id"}} and answers 204 to
allow or 403 to refuse, with a message for the user (JSON {"message": ...} or
plain text). Any other answer, an error or a time-out follows the configured
default, allow or deny.

The service is never asked inside a transaction: on PostgreSQL a change takes the
ledger lock, on SQLite every write transaction holds the database's write lock, and a
slow decision service would hold either for every tenant. `decide` runs the change
once to learn the question (and stops there), asks with no transaction open, then runs
it again and checks it asks the same: if the lease changed meanwhile the answer is
about something else, and the request is refused with 409 rather than asked again (a
second question could meet a second change, without end; the client's retry asks
afresh).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, TypeVar

import requests

from gpu_tenancy.config import Config
from gpu_tenancy.domain.states import WAITING
from gpu_tenancy.errors import Conflict, Forbidden

log = logging.getLogger(__name__)
T = TypeVar("T")
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
        body: dict[str, Any] = {"action": action, "lease": lease, "requested_by": {"user_id": user_id}}
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


class Asked(Exception):
    """The change reached its question: it stops there, and its transaction rolls back."""

    def __init__(self, action: str, lease: dict, user_id: str | None):
        super().__init__(action)
        self.action, self.lease, self.user_id = action, lease, user_id


class Question:
    """Stands in for the hook on the first run: raises Asked with what would be asked."""

    def ask(self, action: str, lease: dict, user_id: str | None) -> None:
        raise Asked(action, lease, user_id)


@dataclass(frozen=True)
class Answered:
    """Stands in for the hook on the second run: the service has allowed `asked`;
    a different question means the lease changed while the service was asked."""
    asked: Asked

    def ask(self, action: str, lease: dict, user_id: str | None) -> None:
        if (action, terms(lease), user_id) != (self.asked.action, terms(self.asked.lease), self.asked.user_id):
            raise Conflict(f"the terms of lease {lease.get('id')} changed while the operator's decision service "
                           f"was asked about the {self.asked.action}; nothing was changed: send the request again",
                           "gpu_tenancy.changed_during_decision")


def terms(lease: dict) -> dict:
    """What an answer is about. A waiting lease's start and end are the planner's
    estimates (any replan moves them) and its "now" start moves with the clock; so
    they are left out while the lease waits, as is the status among waiting ones."""
    if lease.get("status") is None or lease["status"] in {s.value for s in WAITING}:
        return {**{k: v for k, v in lease.items() if k not in ("start", "end", "status")}, "waiting": True}
    return lease


def decide(hook: DecisionHook, transaction: Callable[[], ContextManager], work: Callable[..., T]) -> T:
    """Run `work(session, hook)` in a transaction, with the decision service (if any)
    asked outside every transaction (see the module's doc)."""
    if not hook.url:
        with transaction() as session:
            return work(session, hook)
    try:
        with transaction() as session:
            return work(session, Question())   # no question on the way: done, nothing to ask
    except Asked as question:
        asked = question
    hook.ask(asked.action, asked.lease, asked.user_id)
    with transaction() as session:
        return work(session, Answered(asked))

"""The simulated cloud with what the lease-edge property test needs on top of its
own fault hooks: slow deletes, an action run while the engine is inside a cloud
call (the API serving a request meanwhile), and a log of every boot."""
from __future__ import annotations

from dataclasses import dataclass

from gpu_tenancy.cloud.driver import BootRequest, CloudError
from gpu_tenancy.cloud.simulated import NO_VALID_HOST, SimulatedCloud


@dataclass(frozen=True)
class Boot:
    """A boot the cloud was asked for. `refused`: None if it claimed the GPUs, else
    why it answered No valid host: full (the host's GPUs were held), host (down or
    disabled) or injected (the test asked for it)."""
    at: int
    lease_id: str
    vm_index: int
    host: str
    refused: str | None
    holders: tuple[str, ...]   # what held the host's GPUs at that instant, in words


class EdgeCloud(SimulatedCloud):
    def __init__(self, config: dict, clock):
        super().__init__(config, clock)
        self.boots: list[Boot] = []
        self.fired: list[tuple[int, str, str]] = []   # injected faults that fired: (at, operation, class)
        self.release_after: dict[str, int] = {}       # server id -> its slow delete's seconds
        self._slow_next = (0, 0)                       # (how many of the next deletes, seconds each)
        self.tainted: set[str] = set()                 # servers an injected fault or slow delete touched
        self.during_next_call = None                   # one-shot: run at the start of the next delete

    # --- what the test arms ----------------------------------------------------------------
    def slow_down_deletes(self, count: int, seconds: int) -> None:
        self._slow_next = (count, seconds)

    def armed(self) -> bool:
        """Whether an injected fault, slow delete or mid-call action is still to come."""
        return (any(times > 0 for _, times, _ in self._failures.values()) or self._slow_next[0] > 0
                or self.during_next_call is not None)

    def fault_pending(self) -> bool:
        """Whether a server touched by an injected fault still exists or holds GPUs."""
        now = self.clock.now()
        return any(sid in self._servers and (self._servers[sid].deleted_at is None
                                             or self._holds(self._servers[sid], now)) for sid in self.tainted)

    # --- what the test reads ---------------------------------------------------------------
    def holders(self) -> list[tuple[str, str, int | None, str | None, int]]:
        """(server id, lease id, VM index, host, GPUs) of every server holding GPUs now (the
        VM index None: a server the tenant booted)."""
        now = self.clock.now()
        with self._lock:
            return [(s.id, s.lease_id, s.vm_index, s.host, s.gpus)
                    for s in self._servers.values() if self._holds(s, now)]

    def undeleted_leases(self) -> set[str]:
        return {s.lease_id for s in self._servers.values() if s.deleted_at is None}

    def next_change(self) -> int | None:
        """The next instant a server finishes booting or gives its GPUs back."""
        now, times = self.clock.now(), []
        with self._lock:
            for s in self._servers.values():
                if s.deleted_at is None and not s.stuck and s.created_at + self.boot_seconds > now:
                    times.append(s.created_at + self.boot_seconds)
                if s.shelved_at is not None and s.shelved_at + self.delete_seconds > now:   # offloaded then
                    times.append(s.shelved_at + self.delete_seconds)
                if s.deleted_at is not None and self._holds(s, now):
                    times.append(s.deleted_at + self.release_after.get(s.id, self.delete_seconds))
        return min(times, default=None)

    # --- the driver, observed ----------------------------------------------------------------
    def boot(self, request: BootRequest) -> str:
        fired, known = len(self.fired), len(self._servers)
        holders = self._describe_holders(request.host)
        server_id = super().boot(request)
        if len(self._servers) == known:
            return server_id   # a repeated call: the server it made before
        server = self._servers[server_id]
        if len(self.fired) > fired:
            self.tainted.add(server_id)
        refused = None
        if server.fault == NO_VALID_HOST:
            host = self._hosts.get(request.host)
            refused = ("injected" if len(self.fired) > fired else
                       "host" if host is None or not host.up or not host.enabled else "full")
        self.boots.append(Boot(server.created_at, request.lease_id, request.vm_index, request.host,
                               refused, holders))
        return server_id

    def delete_server(self, server_id: str) -> None:
        self._run_during_call()
        server = self._servers.get(server_id)
        before = server.deleted_at if server else None
        try:
            super().delete_server(server_id)
        except CloudError:
            self.tainted.add(server_id)
            raise
        count, seconds = self._slow_next
        if server is not None and before is None and server.deleted_at is not None and count > 0:
            self.release_after[server_id] = seconds
            self.tainted.add(server_id)
            self._slow_next = (count - 1, seconds)

    def _take_failure(self, operation: str):
        injected = super()._take_failure(operation)
        if injected:
            self.fired.append((self.clock.now(), operation, injected[0].value))
        return injected

    def _holds(self, server, now: int) -> bool:
        seconds = self.release_after.get(server.id)
        if seconds is None or server.deleted_at is None:
            return super()._holds(server, now)
        return super()._holds(server, server.deleted_at) and now < server.deleted_at + seconds

    def _run_during_call(self) -> None:
        action, self.during_next_call = self.during_next_call, None
        if action is not None:
            action()

    def _describe_holders(self, host: str) -> tuple[str, ...]:
        now = self.clock.now()
        return tuple(f"server {s.id[:8]} of lease {s.lease_id[:8]} vm{s.vm_index} ({s.gpus} GPUs"
                     + (f", deleted at {s.deleted_at}" if s.deleted_at is not None else "") + ")"
                     for s in self._servers.values() if s.host == host and self._holds(s, now))

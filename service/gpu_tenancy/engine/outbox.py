"""The outbox worker: sends the webhook notices the engine writes (engine/webhooks.py),
apart from the engine's tick, so a receiver, however slow, never holds the engine.

It runs as a job on the engine's scheduler, in the leader only (so it starts and
stops with the engine), and hands each due notice to a pool of
`webhook_workers` threads, at most `webhook_workers_per_target` of them for one
project: a slow receiver slows its own notices, not the others'. The share is the
project's, not the host's: projects whose receivers sit on one host (a relay, a
gateway, a path each) would otherwise share it, and one project's hung path would
hold another's notices back. A share per project is not enough on its own: four
projects with hung receivers would hold eight workers. So the last
`webhook_workers_reserved` free workers go only to a project whose receiver is not
failing (no notice of it waits for a retry, and none of its tries failed in the last
`webhook_backoff_max_seconds`: a receiver that answers a retry and hangs on the next
notice is failing still) and that has no notice under way: the projects whose receivers
hang hold at most the others, and a well-behaved project's notice finds a worker in
the next pass, however many receivers hang.
Each POST has a total deadline, `webhook_timeout_seconds` from connecting to the
answer's status line, not a time-out per read: a receiver that sends a byte every
few seconds is cut off at the deadline, and the notice is retried with the usual
backoff. The connection goes to the address the target check passed (pinned), the
Host header and TLS (SNI, certificate) with the URL's name.

The message-bus notices (engine/notifications.py) go out from here too, on a thread
of their own, one at a time and in order, so a slow broker holds no webhook and a
slow receiver no notification."""
from __future__ import annotations

import http.client
import logging
import os
import socket
import ssl
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from gpu_tenancy.engine import notifications, webhooks
from gpu_tenancy.engine.webhook_targets import Target

log = logging.getLogger(__name__)


class DeadlinePassed(TimeoutError):
    """The receiver did not answer within the total deadline."""


class Outbox:
    def __init__(self, sessions, clock, config, leading=lambda: True, send=None, bus=None):
        self.sessions, self.clock, self.config, self.leading = sessions, clock, config, leading
        self.send = send or post
        # the bus sender, made here: oslo.messaging imported in another thread than the one
        # that made the outbox keeps the process from exiting (its eventlet). It connects on
        # its first send, so a broker down at start delays nothing.
        self.bus_on = bus is not None or bool(config.notifications_transport_url)
        self.bus: notifications.Send | None = bus or (notifications.BusSender(config) if self.bus_on else None)
        self.bus_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-bus")
        self._bus_busy = False
        self._bus_held = (0, 0)   # (not before, sends in a row that ended in an error): see _send_bus
        self.pool = ThreadPoolExecutor(max_workers=config.webhook_workers, thread_name_prefix="outbox")
        self._lock = threading.Condition()
        self._sending: dict[int, str] = {}   # delivery id -> project id
        self._failed_at: dict[str, int] = {}   # project id -> when a try of its last failed
        # delivery id -> (not before, writes failed): tries whose result could not be recorded wait
        # the backoff in memory, the row being as it was (and the database perhaps away)
        self._held: dict[int, tuple[int, int]] = {}
        self._stopped = False

    def attach(self, scheduler) -> None:
        """Run on the engine's scheduler: started with it, and stopped with it."""
        from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
        scheduler.add_job(self.run_once, "interval", id="outbox", seconds=self.config.engine_tick_seconds,
                          next_run_time=datetime.now(timezone.utc), coalesce=True, max_instances=1)
        scheduler.add_listener(lambda _event: self.stop(), EVENT_SCHEDULER_SHUTDOWN)

    def run_once(self) -> int:
        """Hand the due notices to the workers; returns how many were handed on (it does
        not wait for them)."""
        if not self.leading():
            return 0
        self._hand_bus()
        per_project = self.config.webhook_workers_per_target
        with self._lock:
            if self._stopped:
                return 0
            busy = self._projects()
            full = {project for project, n in busy.items() if n >= per_project}
            free = self.config.webhook_workers - len(self._sending)
            skip = set(self._sending) | self._holding()
        handed = 0
        # read again while workers are free and the last read found a receiver full: the oldest
        # notices may all be one project's, and its receiver's share must not idle the others
        while free > 0:
            limit = free * 4
            failing_ok = free > self.config.webhook_workers_reserved
            found = webhooks.due(self.sessions, self.clock.now(), skip, full, limit=limit, failing_ok=failing_ok)
            filled = False
            for notice in each_project_in_turn(found):
                with self._lock:
                    if len(self._sending) >= self.config.webhook_workers or self._stopped:
                        return handed
                    under_way = self._projects().get(notice.project_id, 0)
                    if under_way >= per_project:
                        full.add(notice.project_id)   # its notices all go to this receiver
                        filled = True
                        continue
                    if (notice.failing or under_way or self._failed_lately(notice.project_id)) \
                            and not self._beyond_reserve():
                        full.add(notice.project_id)   # the reserve is for the others (module doc)
                        filled = True
                        continue
                    self._sending[notice.id] = notice.project_id
                    self.pool.submit(self._deliver, notice)   # under the lock: stop() cannot come between
                skip.add(notice.id)
                handed += 1
                free -= 1
            if not filled or len(found) < limit:   # nothing left that a free worker may take
                break
        return handed

    def _holding(self) -> set[int]:
        """The deliveries waiting out a failed record's backoff (called with the lock held)."""
        now, longest = self.clock.now(), self.config.webhook_backoff_max_seconds
        for id_, (until, _writes) in list(self._held.items()):
            if until + longest < now:   # long past: the row was written since, or will be
                del self._held[id_]
        return {id_ for id_, (until, _writes) in self._held.items() if until > now}

    def _failed_lately(self, project_id: str) -> bool:
        """A try of the project's failed within the longest backoff (called with the lock held)."""
        failed = self._failed_at.get(project_id)
        if failed is not None and self.clock.now() - failed >= self.config.webhook_backoff_max_seconds:
            del self._failed_at[project_id]
            failed = None
        return failed is not None

    def _beyond_reserve(self) -> bool:
        """A worker is free outside the reserve (called with the lock held)."""
        return self.config.webhook_workers - len(self._sending) > self.config.webhook_workers_reserved

    def _hand_bus(self) -> None:
        with self._lock:
            if not self.bus_on or self._bus_busy or self._stopped or self.clock.now() < self._bus_held[0]:
                return
            self._bus_busy = True
            self.bus_pool.submit(self._send_bus)

    def _send_bus(self) -> None:
        failed = True
        try:
            assert self.bus is not None   # bus_on
            notifications.send_due(self.sessions, self.clock, self.config, self.bus,
                                   keep_going=lambda: not self._stopped)
            failed = False
        except Exception:
            log.exception("bus notifications could not be sent or recorded; they are tried again after a backoff")
        finally:
            with self._lock:
                # a send whose result could not be written leaves its notice due as it was: without
                # this wait every pass would send it again at once, for as long as the writes fail
                errors = self._bus_held[1] + 1 if failed else 0
                wait = min(2 ** (errors - 1), self.config.notifications_backoff_max_seconds) if errors else 0
                self._bus_held = (self.clock.now() + wait, errors)
                self._bus_busy = False
                stopped = self._stopped
                self._lock.notify_all()
            if stopped:
                self._close_bus()

    def _projects(self) -> Counter:
        return Counter(self._sending.values())

    def _deliver(self, notice: webhooks.Due) -> None:
        delivered, recorded = 0, False
        try:
            delivered = webhooks.attempt(self.sessions, self.clock, self.config, notice, self.send)
            recorded = True
        except Exception:
            log.exception("webhook delivery %s could not be recorded; it is tried again after the backoff",
                          notice.id)
        finally:
            with self._lock:
                self._sending.pop(notice.id, None)
                if recorded:
                    self._held.pop(notice.id, None)
                else:   # the same backoff as a failed delivery: the row still counts the tries before
                    writes = self._held.get(notice.id, (0, 0))[1] + 1
                    wait = webhooks.backoff(self.config, notice.attempts + writes)
                    self._held[notice.id] = (self.clock.now() + wait, writes)
                if not delivered and notice.url is not None:   # (a removed webhook's notice: no receiver failed)
                    self._failed_at[notice.project_id] = self.clock.now()
                self._lock.notify_all()

    def wait(self, timeout: float) -> bool:
        """Until no notice is being sent (for tests and a clean stop); False on time-out."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._sending and not self._bus_busy, timeout)

    def sending(self) -> int:
        with self._lock:
            return len(self._sending)

    def stop(self) -> None:
        """Start nothing new; a POST under way ends by its deadline."""
        with self._lock:
            self._stopped = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.bus_pool.shutdown(wait=False)   # a send handed on runs, and stops after its notice
        with self._lock:
            idle = not self._bus_busy
        if idle:   # else the send under way closes it when it ends
            self._close_bus()

    def _close_bus(self) -> None:
        close = getattr(self.bus, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                log.exception("closing the bus transport failed")


def each_project_in_turn(notices: list[webhooks.Due]) -> list[webhooks.Due]:
    """The notices, each project's first before any project's second (and so on), oldest first
    within each round: the workers a pass has go one to each project before two to any."""
    rank: Counter = Counter()
    ranked = []
    for n, notice in enumerate(notices):
        ranked.append((rank[notice.project_id], n, notice))
        rank[notice.project_id] += 1
    return [notice for _rank, _n, notice in sorted(ranked, key=lambda r: r[:2])]


def post(target: Target, body: bytes, headers: dict, deadline: float) -> int:
    """POST to the pinned target and return the answer's HTTP status; DeadlinePassed if
    the answer's status line has not come `deadline` seconds after starting. Redirects
    are not followed (they could lead where the target check would refuse)."""
    conn = PinnedHTTPS(target, deadline) if target.scheme == "https" else PinnedHTTP(target, deadline)
    timer = threading.Timer(deadline, conn.abandon)
    timer.daemon = True
    timer.start()
    try:
        conn.request("POST", target.path, body=body, headers=headers)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        if conn.abandoned:
            raise DeadlinePassed(f"no answer within {deadline:g} s") from None
        raise exc
    finally:
        timer.cancel()
        conn.close()


class Pinned:
    """Connects to the target's checked addresses only; `abandon` (the deadline) shuts
    the connection down under whatever read or write is waiting on it."""

    if TYPE_CHECKING:   # from the http.client connection it is mixed into
        port: int
        timeout: float | None

    def _setup(self, target: Target) -> None:
        self.addresses = target.addresses
        self.abandoned = False
        self._guard = threading.Lock()
        self._fd: int | None = None   # the connection's descriptor, the same under TLS
        self._ends = time.monotonic() + (self.timeout or 0)   # the total deadline, for all addresses

    def _open(self) -> socket.socket:
        error: OSError | None = None
        for address in self.addresses:
            left = self._ends - time.monotonic()
            if self.abandoned or left <= 0:   # each address gets what is left, not the whole deadline
                raise DeadlinePassed("the deadline passed while connecting")
            try:
                sock = socket.create_connection((address, self.port), left)
            except OSError as exc:
                error = exc
                continue
            with self._guard:
                if self.abandoned:
                    sock.close()
                    raise DeadlinePassed("the deadline passed while connecting")
                self._fd = sock.fileno()
            return sock
        raise error or OSError("no address to connect to")

    def abandon(self) -> None:
        with self._guard:
            self.abandoned = True
            if self._fd is None:
                return
            # through a duplicate of the descriptor: it works under TLS too, and leaves the
            # socket objects to the thread that is using them
            twin = socket.socket(fileno=os.dup(self._fd))
            try:
                twin.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                twin.close()

    def close(self) -> None:
        with self._guard:   # the descriptor may be reused once closed: abandon must not reach it
            self._fd = None
        super().close()   # type: ignore[misc]   # the connection class mixed in after this one


class PinnedHTTP(Pinned, http.client.HTTPConnection):
    def __init__(self, target: Target, deadline: float):
        http.client.HTTPConnection.__init__(self, target.host, target.port, timeout=deadline)
        self._setup(target)

    def connect(self) -> None:
        self.sock = self._open()


class PinnedHTTPS(Pinned, http.client.HTTPSConnection):
    def __init__(self, target: Target, deadline: float):
        self.tls = ssl.create_default_context()
        http.client.HTTPSConnection.__init__(self, target.host, target.port, timeout=deadline, context=self.tls)
        self._setup(target)

    def connect(self) -> None:
        # the certificate is checked against the URL's name (and SNI sent with it), not the address
        try:
            self.sock = self.tls.wrap_socket(self._open(), server_hostname=self.host)
        except BaseException:
            with self._guard:   # wrap_socket closed the descriptor
                self._fd = None
            raise

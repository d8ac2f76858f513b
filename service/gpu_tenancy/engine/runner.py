"""APScheduler drives the lifecycle in the leader engine: a tick on a timer,
and at once when the API changes something."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

from apscheduler.schedulers.background import BackgroundScheduler

from gpu_tenancy.db.session import session_scope
from gpu_tenancy.engine.leader import step_down, try_lead
from gpu_tenancy.engine.lifecycle import Lifecycle
from gpu_tenancy.engine.outbox import Outbox

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    """Now for the scheduler, which keeps UTC: a naive local time it reads as UTC (east of UTC
    a wake set the tick, and the timer with it, hours ahead)."""
    return datetime.now(timezone.utc)


class EngineRunner:
    def __init__(self, lifecycle: Lifecycle):
        self.lifecycle = lifecycle
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leading = False
        self.scheduler = BackgroundScheduler(timezone="UTC")
        # webhook notices go out apart from the tick, on this scheduler: started and stopped with it
        self.outbox = Outbox(lifecycle.sessions, lifecycle.clock, lifecycle.config, leading=lambda: self.leading)
        self.outbox.attach(self.scheduler)
        # One tick at a time. A wake that comes while a tick runs is not lost: it sets
        # _woken, and the tick that holds the lock looks at it after letting go and
        # ticks again (the scheduler alone would skip a run of a job still running).
        self._tick_lock = threading.Lock()
        self._woken = False
        # Wakes whose replan may wait (wake(can_wait=True)): how many were asked, how many a full
        # tick begun after them has served, and when the last full tick began or was asked to
        # begin at once (monotonic seconds: a wake between the ask and the tick's start waits).
        self._asked = 0
        self._served = 0
        self._began: float | None = None
        self._asked_lock = threading.Lock()
        self.monotonic = time.monotonic   # the spacing's clock (tests set their own)
        self._stopping = False   # stop() asked: no pass begins after the one under way
        self._finished = False   # the stop's wait has ended: jobs, POSTs, step-down

    def run_once(self) -> bool:
        """Lead if we can, and if we lead, tick; again while woken meanwhile.
        Returns whether we lead."""
        while True:
            if not self._tick_lock.acquire(blocking=False):
                return self.leading          # a tick is running; it sees the wake after
            try:
                self._woken = False
                leading = self._lead_and_tick()
            finally:
                self._tick_lock.release()
            if not (leading and self._woken) or self._stopping:
                return leading

    def _lead_and_tick(self) -> bool:
        cfg = self.lifecycle.config
        with session_scope(self.lifecycle.sessions) as session:
            leading = try_lead(session, self.holder, self.lifecycle.clock.now(), cfg.leader_lease_seconds)
        if leading != self.leading:
            log.info("engine %s is now %s", self.holder, "the leader" if leading else "standby")
            self.leading = leading
        if leading:
            seen, self._began = self._asked, self.monotonic()   # wakes asked before the tick reads
            try:
                busy = self.lifecycle.tick()
                self._served = max(self._served, seen)
            except Exception:
                log.exception("engine tick failed")
                busy = False
            if busy:   # a VM is booting or being deleted: watch it closely, not every tick
                self._watch_soon()
        return leading

    def renew(self) -> None:
        """The leadership renewed beside the tick, on its own timer (a third of the lease): a tick
        can outlast the lease (a volume waited for, a slow cloud), and renewed only as each tick
        began, the standby took over in the middle of one and both engines acted on the same
        leases (two boots, two volumes). Lost meanwhile (this process stalled past the lease), it
        stops leading: the next tick asks again."""
        if not self.leading:
            return
        cfg = self.lifecycle.config
        with session_scope(self.lifecycle.sessions) as session:
            still = try_lead(session, self.holder, self.lifecycle.clock.now(), cfg.leader_lease_seconds)
        if not still:
            log.warning("engine %s lost the leadership during a tick", self.holder)
            self.leading = False

    def watch_once(self) -> None:
        """Between ticks: advance booting and ending leases only (no replan, which can
        take most of a second with thousands waiting); a full tick once GPUs come free."""
        if not self.leading:
            return
        # Never beside a tick: both would carry the same booting lease on (two attaches of
        # its volume, the second refused, failed a lease under load). The tick does the work.
        if not self._tick_lock.acquire(blocking=False):
            self._watch_soon()
            return
        try:
            freed = self.lifecycle.watch()
            busy = self.lifecycle.in_flight()
        except Exception:
            log.exception("engine watch failed")
            return
        finally:
            self._tick_lock.release()
        if freed or self._woken:   # a wake that came during the watch found the lock taken
            self.wake()
        if busy and not freed:
            self._watch_soon()

    def _watch_soon(self) -> None:
        if self.scheduler.running:
            when = utc_now() + timedelta(seconds=self.lifecycle.config.provisioning_poll_seconds)
            self.scheduler.add_job(self.watch_once, "date", run_date=when, id="watch", replace_existing=True)

    def start(self) -> None:
        self.scheduler.add_job(self.run_once, "interval", id="tick",
                               seconds=self.lifecycle.config.engine_tick_seconds,
                               # a second instance finds the tick lock taken and returns at once
                               next_run_time=utc_now(), coalesce=True, max_instances=2)
        self.scheduler.add_job(self.renew, "interval", id="leadership",
                               seconds=max(1.0, self.lifecycle.config.leader_lease_seconds / 3),
                               coalesce=True, max_instances=1)
        self.scheduler.start()

    def wake(self, can_wait: bool = False) -> None:
        """Tick soon: something changed. `can_wait`: a create fitted into the plan or a cancel
        taken out of it (the queue is long), which ask the replan only to move other leases
        earlier: its tick begins no sooner than engine_wake_min_interval_seconds after the last
        full tick began, so a member's create-and-cancel loop does not keep the engine
        replanning back to back (each replan holds the ledger lock and a core for most of a
        second at 10,000 waiting). Every other wake ticks at once, and so does the timer."""
        if can_wait:
            with self._asked_lock:
                self._asked += 1
            if self._defer():
                return
        self._began = self.monotonic()
        self._woken = True
        if self.scheduler.running:
            self.scheduler.modify_job("tick", next_run_time=utc_now())

    def _defer(self) -> bool:
        """Whether a replan asked by a wake that can wait is not due yet; if so, one job ticks
        when it is (any number of such wakes meanwhile share it)."""
        spacing = self.lifecycle.config.engine_wake_min_interval_seconds
        began = self._began
        wait = 0.0 if not spacing or began is None else began + spacing - self.monotonic()
        if wait <= 0:
            return False
        if self.scheduler.running:
            self.scheduler.add_job(self._deferred_due, "date", id="woken", replace_existing=True,
                                   run_date=utc_now() + timedelta(seconds=wait))
        return True

    def _deferred_due(self) -> None:
        """The deferred wakes' tick, unless a full tick begun after them served them (the timer's,
        another wake's); spaced from the last one begun, whichever it was."""
        if self._asked > self._served and not self._defer():
            self.wake()

    def stop(self, within: float | None = None) -> bool:
        """Stop the jobs, wait for the pass and the webhook POSTs under way, and step down.
        Returns False if they had not ended `within` seconds: then this has not stepped down (the
        pass may still act), and the caller exits without them, as a crash would (stopping.py);
        the standby takes over once the leadership lapses (leader_lease_seconds)."""
        self._stopping, self._finished = True, False
        if within is None:
            self._finish(None)
            return True
        # the wait in a thread of its own: APScheduler's shutdown(wait=True) has no time limit
        finishing = threading.Thread(target=self._finish, args=(time.monotonic() + within,),
                                     name="engine-stop", daemon=True)
        finishing.start()
        finishing.join(within)
        if not self._finished:
            log.warning("engine %s: its pass or webhook POSTs under way had not ended %gs after the stop",
                        self.holder, within)
        return self._finished

    def _finish(self, deadline: float | None) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)   # the outbox stops with it: starts no POST
        if deadline is not None and not self.outbox.wait(max(0.0, deadline - time.monotonic())):
            return   # a POST is still under way: the caller leaves it (its notice is sent again)
        if self.leading:
            with session_scope(self.lifecycle.sessions) as session:
                step_down(session, self.holder)
        self._finished = True

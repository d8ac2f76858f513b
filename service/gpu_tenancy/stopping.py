"""How `gpu-tenancy demo` and `gpu-tenancy engine` stop on SIGTERM (or ^C), within a bound.

The handler only sets an attribute. Python runs a handler in the main thread between two of its
bytecodes, and may do so while that thread holds a lock: the old handler, `threading.Event.set`,
took the lock of the Event the main thread was polling (`Event.wait` holds it around its wait),
so it waited for itself for ever: the demo ran on after its stop (two hours, CI under load).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

POLL_SECONDS = 0.2


class StopSignal:
    """Set once SIGTERM came; no lock, so its handler can run anywhere."""

    def __init__(self) -> None:
        self.asked = False

    def ask(self, *_signal_args) -> None:
        self.asked = True


def on_sigterm() -> StopSignal:
    stop = StopSignal()
    signal.signal(signal.SIGTERM, stop.ask)
    return stop


def wait_for(stop: StopSignal) -> None:
    """Until SIGTERM or ^C. A timed sleep: a signal the kernel gives another thread (the demo's
    server thread, in select) wakes nothing, and its handler runs once this (the main) thread does."""
    try:
        while not stop.asked:
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        pass


def leave_now(command: str, left: str, code: int = 0) -> None:
    """Exit at once, without waiting for `left` (an engine pass past its stop's deadline). As a
    crash would: its open transaction is never committed, and the next engine carries on the
    leases it was moving (every cloud step is idempotent per lease; tests/functional/test_crash_safety.py).
    The interpreter's own exit would wait for that thread: it is not a daemon."""
    def say() -> None:
        print(f"gpu-tenancy {command}: stopping without {left}", file=sys.stderr, flush=True)
        sys.stdout.flush()
    # said by a thread given a second: a write to a pipe nobody reads would block the exit with it
    saying = threading.Thread(target=say, daemon=True)
    saying.start()
    saying.join(1.0)
    os._exit(code)

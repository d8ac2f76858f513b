"""An injectable clock: the service uses wall time, tests and trace replay a virtual one."""
from __future__ import annotations

import threading
import time


class SystemClock:
    def now(self) -> int:
        return int(time.time())


class VirtualClock:
    """Time moves only when told to."""

    def __init__(self, start: int):
        self._now = int(start)
        self._lock = threading.Lock()

    def now(self) -> int:
        return self._now

    def advance(self, seconds: int) -> int:
        with self._lock:
            self._now += int(seconds)
            return self._now

    def set(self, t: int) -> None:
        with self._lock:
            if t < self._now:
                raise ValueError("a virtual clock does not go back")
            self._now = int(t)

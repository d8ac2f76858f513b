"""Two sides of a race on PostgreSQL, ordered by hand: the first held just past a check, the
second let run until it finishes or waits for a lock, then the first let go on."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import create_engine, text


class Held:
    """A function wrapped to stop the first thread that passes it, where `when` (given what it
    returned, then its arguments) says, until released."""

    def __init__(self, when: Callable[..., bool] = lambda *a, **k: True) -> None:
        self.when, self.passed, self.release, self.thread = when, threading.Event(), threading.Event(), None

    def around(self, real: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            out = real(*args, **kwargs)
            if threading.get_ident() == self.thread and not self.passed.is_set() and self.when(out, *args, **kwargs):
                self.passed.set()
                assert self.release.wait(60)
            return out
        return wrapped


def race(db_url: str, point: Held, first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """`first` run until it passes `point`, then `second` until it finishes or waits for a lock, then both to the end."""
    def run_first():
        point.thread = threading.get_ident()
        return first()
    watcher = create_engine(db_url)
    try:
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(run_first)
            assert point.passed.wait(60), a.exception(0) if a.done() else "the first never got there"
            b = pool.submit(second)
            deadline = time.monotonic() + 20
            while not b.done() and time.monotonic() < deadline:
                with watcher.connect() as c:
                    if c.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                     "AND datname = current_database()")):
                        break
                time.sleep(0.05)
            point.release.set()
            return a.result(60), b.result(60)
    finally:
        point.release.set()
        watcher.dispose()

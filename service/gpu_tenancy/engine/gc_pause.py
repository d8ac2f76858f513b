"""Python's cyclic garbage collector paused over a replan. A replan loads, plans and writes
thousands of leases, and each full collection that the allocations set off walks every
object alive, the loaded rows among them, again: about a third of a replan's CPU at 10,000
waiting leases (docs/performance.md, "The collector paused over a replan"). Nothing a replan
makes needs the collector (its objects are freed by reference counts, or once it is back on).
Process-wide, as the collector is: paused while any thread is inside, back as it was after
the last one leaves."""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_inside = 0             # threads inside collector_paused()
_was_enabled = False    # the collector's state when the first of them came in


@contextmanager
def collector_paused() -> Iterator[None]:
    global _inside, _was_enabled
    with _lock:
        if _inside == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _was_enabled:
                gc.enable()

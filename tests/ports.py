"""Ports for the processes tests start on 127.0.0.1."""
from __future__ import annotations

import os
import socket


def free_port(ports: range | None = None) -> int:
    """The first port of `ports` free on 127.0.0.1 now, or, with no range, one the
    kernel picks. A range keeps a test's processes where they are easy to find."""
    if ports is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    # Under pytest-xdist each worker takes its own ports of a range (port % workers), so
    # two workers never find the same one free at once and both start on it.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    for port in (p for p in ports if p % workers == worker):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {ports.start}-{ports.stop - 1}")

"""The simulated cloud's state in a file, for tests where the engine runs (and is
killed) in another process: the cloud must outlive the engine, as a real one does.

`state_file` in the simulated cloud's config turns it on. The cloud's lock then
also takes an exclusive flock on the file: the outermost entry loads the state,
the outermost exit writes it back (atomically, by rename), so every driver call
sees what every process did before it, and a process killed mid-call leaves the
state as it was before that call."""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import threading
from pathlib import Path

from gpu_tenancy.cloud.driver import HostInfo
from gpu_tenancy.domain.failures import FailureClass


class StateFileLock:
    def __init__(self, path: str, cloud):
        self.path, self.cloud = Path(path), cloud
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        with self:   # a new file starts from the config's hosts and images
            pass

    def __enter__(self):
        self._thread_lock.acquire()
        self._depth += 1
        if self._depth == 1:
            try:
                self._fd = os.open(f"{self.path}.lock", os.O_CREAT | os.O_RDWR, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                if self.path.exists():
                    load(self.cloud, json.loads(self.path.read_text()))
            except BaseException:
                self._leave()
                raise
        return self

    def __exit__(self, *exc):
        try:
            if self._depth == 1:
                tmp = Path(f"{self.path}.tmp")
                tmp.write_text(json.dumps(dump(self.cloud)))
                os.replace(tmp, self.path)
        finally:
            self._leave()

    def _leave(self):
        if self._depth == 1 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        self._depth -= 1
        self._thread_lock.release()


def dump(cloud) -> dict:
    return {
        "hosts": {n: dataclasses.asdict(h) for n, h in cloud._hosts.items()},
        "servers": {i: dataclasses.asdict(s) for i, s in cloud._servers.items()},
        "volumes": {i: dataclasses.asdict(v) for i, v in cloud._volumes.items()},
        "flavors": cloud._flavors,
        "images": cloud._images,
        "failures": {op: [f[0].value, f[1], f[2]] for op, f in cloud._failures.items()},
        "slow_deletes": cloud._slow_deletes,
        "lease_classes": cloud._lease_classes,
        "lease_inventory": cloud._lease_inventory,
        "networking": cloud._dump_networks(),
    }


def load(cloud, state: dict) -> None:
    from gpu_tenancy.cloud.simulated import _Server, _Volume
    cloud._hosts = {n: HostInfo(**h) for n, h in state["hosts"].items()}
    cloud._servers = {i: _Server(**s) for i, s in state["servers"].items()}
    cloud._volumes = {i: _Volume(**v) for i, v in state["volumes"].items()}
    cloud._flavors = state["flavors"]
    cloud._images = state["images"]
    cloud._failures = {op: [FailureClass(f[0]), f[1], f[2]] for op, f in state["failures"].items()}
    cloud._slow_deletes = state.get("slow_deletes", [0, 0])
    cloud._lease_classes = state.get("lease_classes", [])
    cloud._lease_inventory = state.get("lease_inventory", {})
    cloud._load_networks(state.get("networking"))

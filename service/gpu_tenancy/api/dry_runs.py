"""A project's dry runs (`POST /v1/leases?dry_run=true`), at most `max_dry_runs_per_minute` in
any 60 s in each API process, else a 429 with Retry-After. A dry run writes nothing, so no
other limit held it: each plans the whole queue with the ask added and tries its
counter-offers (0.3-0.4 s of CPU at 1,000 waiting on 100 hosts, seconds at 10,000), and a
member sending them in a loop kept the API's workers planning for it while other tenants'
requests waited. Kept in the process, not the database (a count written per dry run would
take the write lock the dry run no longer holds): with W workers a project may run W times
the limit a minute, still bounded."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from gpu_tenancy import error_codes as codes
from gpu_tenancy.api import runtime as rt
from gpu_tenancy.errors import TooManyRequests

WINDOW = 60   # s


@dataclass
class DryRunLimit:
    per_minute: int
    _taken: dict[str, deque[int]] = field(default_factory=dict)   # per project, the times of its dry runs
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the threads of a worker share it

    def take(self, project_id: str, now: int) -> None:
        """Count one dry run of `project_id` at `now`, or refuse it (429) past the limit."""
        with self._lock:
            times = self._taken.setdefault(project_id, deque())
            while times and times[0] <= now - WINDOW:
                times.popleft()
            if len(times) >= self.per_minute:
                wait = max(1, times[0] + WINDOW - now)
                raise TooManyRequests(
                    f"project {project_id} has asked for {len(times)} dry runs in the last minute, the most "
                    f"this service plans for one project (each plans the whole queue); ask again in {wait} s, "
                    "or create the lease: its answer says where it waits", wait, codes.TOO_MANY_DRY_RUNS)
            times.append(now)
            # projects that stopped asking are forgotten: the table holds the last minute's askers only
            for other in [p for p, t in self._taken.items() if t and t[-1] <= now - WINDOW]:
                del self._taken[other]


def take(project_id: str) -> None:
    runtime = rt.runtime()
    limit = runtime.extras.get("dry_runs")
    if limit is None:
        limit = runtime.extras["dry_runs"] = DryRunLimit(runtime.config.max_dry_runs_per_minute)
    limit.take(project_id, runtime.clock.now())

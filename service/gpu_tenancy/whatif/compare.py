"""The what-if itself: one history replayed under the current settings and under the
proposed ones, side by side."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.domain.reclaim import ReclaimSettings
from gpu_tenancy.timeutil import rfc3339
from gpu_tenancy.whatif import changes as ch
from gpu_tenancy.whatif import figures
from gpu_tenancy.whatif.history import History
from gpu_tenancy.whatif.replay import replay


def what_if(history: History, settings: PlannerSettings, proposed: Sequence[ch.Change],
            progress: Callable[[float], None] | None = None,
            reclaim: ReclaimSettings = ReclaimSettings()) -> dict[str, Any]:
    """The two replays' figures and who gains or loses. `progress(done)` (0 to 1) is called as the
    replays go, often: it may raise to stop them. BadChange when a change cannot apply. `reclaim`:
    the engine's (engine/early_ends.settings), with which both replays end borrowing leases early."""
    changed_history, changed_settings = ch.apply(history, settings, proposed)
    t0 = time.perf_counter()
    span = max(1, history.end - history.start)

    def track(offset: float) -> Callable[[int], None] | None:
        if progress is None:
            return None
        report = progress
        return lambda t: report(offset + 0.5 * min(1.0, max(0.0, (t - history.start) / span)))

    current = figures.summary(history, replay(history, settings, track(0.0), reclaim))
    after = figures.summary(changed_history, replay(changed_history, changed_settings, track(0.5), reclaim))
    return {
        "window": {"start": rfc3339(history.start), "end": rfc3339(history.end),
                   "days": round((history.end - history.start) / 86400, 2)},
        "leases": len(history.leases),
        "gpus": sum(h.gpus for h in history.hosts if h.enabled),
        "changes": [str(c) for c in proposed],
        "current": current,
        "proposed": after,
        "projects": figures.projects(current, after),
        "replay_seconds": round(time.perf_counter() - t0, 2),
    }

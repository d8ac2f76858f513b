"""Named points in starting and ending a lease where a test can make the engine
process die as kill -9 would: GPU_TENANCY_CRASH_AT=<step> sends it SIGKILL there.
Nothing is flushed or rolled back on the way out, so a restarted engine meets
exactly what a real crash leaves. Unset (always, in production) it does nothing."""
from __future__ import annotations

import os
import signal

ENV = "GPU_TENANCY_CRASH_AT"
# in the order a lease meets them
START_STEPS = ("intent_written", "flavor_made", "volume_made", "boot_requested", "active_seen")
END_STEPS = ("end_intent_written", "delete_requested")
STEPS = START_STEPS + END_STEPS


def crash_point(step: str) -> None:
    if os.environ.get(ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)

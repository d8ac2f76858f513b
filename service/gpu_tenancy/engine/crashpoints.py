"""Named points in starting and ending a lease where a test can make the engine
process die as kill -9 would: GPU_TENANCY_CRASH_AT=<step> sends it SIGKILL there.
Nothing is flushed or rolled back on the way out, so a restarted engine meets
exactly what a real crash leaves. Unset (always, in production) it does nothing."""
from __future__ import annotations

import os
import signal

ENV = "GPU_TENANCY_CRASH_AT"
# in the order a lease meets them
START_STEPS = ("intent_written", "class_made", "inventory_set", "flavor_made", "volume_made", "boot_requested",
               "active_seen", "access_granted")
END_STEPS = ("end_intent_written", "access_revoked", "delete_requested", "inventory_removed")
# the steps a lease the tenant boots meets (no volume, no boot of the service's)
TENANT_STEPS = ("intent_written", "class_made", "inventory_set", "flavor_made", "access_granted",
                "end_intent_written", "access_revoked", "inventory_removed")
STEPS = START_STEPS + END_STEPS


def crash_point(step: str) -> None:
    if os.environ.get(ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)

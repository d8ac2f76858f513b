"""The hosts as the planner reads them (HostProfiles). Pure."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .model import Hold, Host
from .profile import StepProfile

__all__ = ["HostProfiles"]


class HostProfiles:
    """The hosts as the planner reads them: the enabled hosts of each GPU model (what a
    lease could ever run on) and each host's free GPUs over time beside some holds.
    plan() and extension_conflicts() both read hosts through it."""

    def __init__(self, hosts: Sequence[Host]):
        self.by_name = {h.name: h for h in hosts}
        self.enabled: dict[str, list[Host]] = defaultdict(list)
        for h in hosts:
            if h.enabled:
                self.enabled[h.gpu_model].append(h)
        self._vm_slots: dict[tuple[str, int], int] = {}

    def vm_slots(self, m: str, g: int) -> int:
        """How many VMs of g GPUs the enabled m hosts take at once, when empty."""
        key = (m, g)
        n = self._vm_slots.get(key)
        if n is None:
            n = self._vm_slots[key] = sum(h.gpus // g for h in self.enabled.get(m, ()))
        return n

    def never_fits(self, m: str, g: int, n: int) -> str:
        """Why n VMs of g GPUs never fit on the enabled m hosts, in words."""
        enabled = self.enabled.get(m, ())
        if not enabled:
            return f"there are no enabled {m} hosts"
        biggest = max(h.gpus for h in enabled)
        if g > biggest:
            return f"needs {g} {m} on one host; the largest enabled {m} host has {biggest}"
        return (f"needs {n} VMs of {g} {m} at the same time; all enabled {m} hosts together "
                f"can take at most {self.vm_slots(m, g)} such VMs")

    def free(self, now: int, name: str, holds: Sequence[Hold]) -> StepProfile | None:
        """Host `name`'s free GPUs over time beside `holds`; None: no such host."""
        host = self.by_name.get(name)
        if host is None:
            return None
        prof = StepProfile(now, host.gpus)
        for h in holds:
            if h.host == name and h.end > now:
                prof.add(h.start, h.end, -h.gpus)
        return prof

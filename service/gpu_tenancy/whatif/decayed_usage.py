"""The engine's fair-share usage (domain/fairshare: GPU-hours held, decayed with a half-life) as
the replay keeps it: what ended jobs held, summed once at their end, and each running job's
start read once, so a decision costs one term per running job. Times are counted from the first
submission (t0) so the exponentials stay small."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

Key = tuple[str, str]   # (project, GPU model)


class DecayedUsage:
    def __init__(self, half_life: int):
        self.lam = math.log(2) / half_life
        self.t0: int | None = None   # the first submission
        self.done: dict[Key, float] = {}   # key: sum of gpus * (e^{lam end} - e^{lam start}) / lam
        self.starts: dict[str, tuple[Key, int, float]] = {}   # a running job's key, GPUs, e^{lam start}

    def begin(self, now: int) -> None:
        """A job was submitted: the first one sets t0."""
        if self.t0 is None:
            self.t0 = now

    def ended(self, jid: str, key: Key, gpus: int, start: int, end: int) -> None:
        self.starts.pop(jid, None)
        lam, t0 = self.lam, self.t0 or 0
        held = (math.exp(lam * (end - t0)) - math.exp(lam * (start - t0))) / lam
        self.done[key] = self.done.get(key, 0.0) + gpus * held

    def at(self, now: int, running: Mapping[str, Any], key_of: Callable[[Any], Key]) -> dict[Key, float]:
        """The decayed GPU-hours of every key at `now` (fairshare.decayed_gpu_hours); `running`: the
        event loop's jid -> (job, hosts, start)."""
        lam, t0 = self.lam, self.t0 or 0   # set by the first submit, before any decision
        scale = math.exp(-lam * (now - t0)) / 3600.0
        acc = dict(self.done)
        e_now, known_starts = math.exp(lam * (now - t0)), self.starts
        get = acc.get
        for job, _hosts, st in running.values():
            known = known_starts.get(job.jid)
            if known is None:
                known = known_starts[job.jid] = (key_of(job), job.gpus, math.exp(lam * (st - t0)))
            key, gpus, e_st = known
            acc[key] = get(key, 0.0) + gpus * ((e_now - e_st) / lam)
        return {k: v * scale for k, v in acc.items()}

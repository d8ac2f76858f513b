"""Leases that keep their GPUs idle after their work is done, in the replay: a seeded share
of the leases, once their real run ends, sit idle until the end they asked for; the rest
end at their real end (a job script calling `gpu-done`, or a user deleting the lease).

Without an idle rule an idle lease holds its GPUs to its asked end. With an operator's
rule (domain/gpu_activity.IdleRule, `then: end`) the lease ends when the rule's idle_step
says so, counting idleness from the real end, and never later than the asked end. The
planner sees only the asked duration either way (it cannot know). A lease is a job of
the replay: anything with jid, runtime, asked (0: = runtime) and gpus; `runtime` is
how long the event loop keeps its GPUs, so the model is a new runtime per lease."""
from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gpu_tenancy.domain.gpu_activity import REPORT_INTERVAL, IdleRule, idle_step

HOUR = 3600
J = TypeVar("J")


def idle_share(jids: Iterable[str], share: float, seed: int = 0) -> frozenset[str]:
    """The leases that stay idle after their run: each drawn on its own (seed, id), so a
    lease's draw does not depend on which other leases the history holds."""
    if not 0.0 <= share <= 1.0:
        raise ValueError("the idle share is a fraction from 0 to 1")
    return frozenset(j for j in jids if random.Random(f"{seed}:{j}").random() < share)


@functools.lru_cache(maxsize=64)
def released_after(rule: IdleRule | None) -> int | None:
    """Idle seconds after which the rule gives the GPUs back: the first report (every
    REPORT_INTERVAL) at which idle_step says to end, the warning given at the report it said
    to warn; None when it never does."""
    if rule is None:
        return None
    warned_at = None
    last = max(rule.warn_after, rule.then_after or 0) + 2 * REPORT_INTERVAL
    for idle_for in range(0, last + 1, REPORT_INTERVAL):
        step = idle_step(rule, idle_for, 0, warned_at, idle_for)
        if step == "warn":
            warned_at = idle_for
        elif step is not None:   # end (or any action that gives the GPUs back)
            return idle_for
    return None


def held_for(runtime: int, asked: int, idle: bool, rule: IdleRule | None) -> int:
    """How long a lease holds its GPUs: its run, plus for an idle lease the idle tail up to
    its asked end, cut where the rule ends it."""
    if not idle or asked <= runtime:
        return runtime
    tail = asked - runtime
    after = released_after(rule)
    return runtime + (tail if after is None else min(tail, after))


def with_idle(jobs: Sequence[J], idle: frozenset[str], rule: IdleRule | None) -> list[J]:
    """The jobs with `runtime` = how long each holds its GPUs under the rule."""
    out = []
    for j in jobs:
        x: Any = j
        held = held_for(x.runtime, x.asked or x.runtime, x.jid in idle, rule)
        out.append(j if held == x.runtime else dataclasses.replace(x, runtime=held))
    return out


@dataclass(frozen=True)
class IdleHours:
    held_idle: float     # GPU-hours held idle without the rule (real end to asked end)
    still_idle: float    # GPU-hours held idle with it (real end to the rule's end)

    @property
    def returned(self) -> float:
        return self.held_idle - self.still_idle


def idle_hours(jobs: Sequence[Any], idle: frozenset[str], rule: IdleRule | None) -> IdleHours:
    """GPU-hours the idle leases hold doing nothing, without any rule and with this one: what
    the rule returns to the queue is the difference. `jobs` with their real run times."""
    held = still = 0
    for j in jobs:
        if j.jid not in idle:
            continue
        asked = j.asked or j.runtime
        held += j.gpus * max(0, asked - j.runtime)
        still += j.gpus * (held_for(j.runtime, asked, True, rule) - j.runtime)
    return IdleHours(held / HOUR, still / HOUR)


def end_rule(minutes: int, warn_minutes: int | None = None) -> IdleRule:
    """`end after X idle minutes`, warned halfway (the warning does not move the end)."""
    warn = warn_minutes if warn_minutes is not None else max(1, minutes // 2)
    return IdleRule(warn_after=warn * 60, then="end", then_after=minutes * 60)

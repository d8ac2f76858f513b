"""The settings an operator proposes, as `key=value` changes, and what they do to a
history and the planner's settings. Every key names what it changes:

    quota.<project>.<model>.gpus=16          nominal GPUs (a new quota if the project had none)
    quota.<project>.<model>.borrow_gpus=8    the borrow limit
    quota.<project>.<model>.weight=2         the fair-share weight for one model
    quota.<project>.<model>.max_duration=P7D the longest lease (seconds or ISO 8601; none)
    weight.<project>=2                       the fair-share weight for every model it has a quota for
    priority_class.<name>.priority=10        the priority of the leases asked with that class
    planner.wait_bound=PT8H                  a planner option: wait_bound, wait_bound_gpu_hours,
                                             wait_bound_leases, fairshare_half_life, age_size_gpu_hours
                                             (> 0), queued_charge (> 0, at most 1000),
                                             queued_charge_spares_gpus (1 to 64) (none: off),
                                             empty_together (true or false)

The planner options take the bounds the service's configuration takes (config.py).

A change that cannot apply raises BadChange, naming the key."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpu_tenancy.domain.model import QuotaLimit
from gpu_tenancy.domain.planner import PlannerSettings
from gpu_tenancy.timeutil import parse_duration
from gpu_tenancy.whatif.history import History

QUOTA_FIELDS = ("gpus", "borrow_gpus", "weight", "max_duration")
PLANNER_FIELDS = ("wait_bound", "wait_bound_gpu_hours", "wait_bound_leases", "fairshare_half_life",
                  "age_size_gpu_hours", "queued_charge", "queued_charge_spares_gpus", "empty_together")
# planner options that are numbers: (kind, lowest, highest, whether the lowest itself is refused), as config.py
PLANNER_NUMBERS: dict[str, tuple[type, float, float, bool]] = {
    "wait_bound_gpu_hours": (float, 1e-6, 10 ** 9, False),
    "wait_bound_leases": (int, 1, 10 ** 9, False),
    "age_size_gpu_hours": (float, 0, math.inf, True),
    "queued_charge": (float, 0, 1000, True),
    "queued_charge_spares_gpus": (int, 1, 64, False),
}
MAX_CHANGES = 100


class BadChange(ValueError):
    pass


@dataclass(frozen=True)
class Change:
    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def parse(items: Iterable[str]) -> list[Change]:
    """'key=value' strings as changes (the CLI's --set, the API's `changes`)."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise BadChange(f"'{item}' is not a change: give key=value, such as weight.<project>=2")
        out.append(Change(key.strip(), value.strip()))
    if len(out) > MAX_CHANGES:
        raise BadChange(f"{len(out)} changes: at most {MAX_CHANGES}")
    return out


def _number(c: Change, kind: type, low: float, none_ok: bool = False, high: float = 10 ** 9,
            above: bool = False) -> Any:
    """The change's value as a `kind` from `low` (more than it, with `above`) to `high`."""
    if none_ok and c.value.lower() in ("none", "null", "off"):
        return None
    try:
        v = kind(c.value)
    except ValueError:
        raise BadChange(f"{c.key}: '{c.value}' is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(v) or v < low or (above and v == low) or v > high:
        bounds = f"more than {low:g}" if above else f"at least {low:g}"
        if math.isfinite(high) and high < 10 ** 9:
            bounds += f" and at most {high:g}"
        raise BadChange(f"{c.key}: {c.value} is out of range ({bounds}{', or none' if none_ok else ''})")
    return v


def _flag(c: Change) -> bool:
    word = c.value.lower()
    if word not in ("true", "false", "on", "off", "yes", "no"):
        raise BadChange(f"{c.key}: '{c.value}' is not true or false")
    return word in ("true", "on", "yes")


def _seconds(c: Change, none_ok: bool = True) -> int | None:
    if none_ok and c.value.lower() in ("none", "null", "off"):
        return None
    try:
        v = parse_duration(int(c.value) if c.value.isdigit() else c.value)
    except ValueError as exc:
        raise BadChange(f"{c.key}: {exc}") from None
    if v < 1:
        raise BadChange(f"{c.key}: a duration of at least one second, or none")
    return v


def apply(history: History, settings: PlannerSettings, changes: Iterable[Change]
          ) -> tuple[History, PlannerSettings]:
    """The history and settings as the changes make them (each applied in turn)."""
    quotas = dict(history.quotas)
    classes = dict(history.priority_classes)
    for c in changes:
        parts = c.key.split(".")
        kind = parts[0]
        if kind == "quota" and len(parts) >= 4 and parts[-1] in QUOTA_FIELDS:
            project, model, name = ".".join(parts[1:-2]), parts[-2], parts[-1]
            q = quotas.get((project, model)) or QuotaLimit(project, model, 0)
            value: Any = (_number(c, float, 1e-6) if name == "weight" else
                     _seconds(c) if name == "max_duration" else _number(c, int, 0))
            quotas[(project, model)] = dataclasses.replace(q, **{name: value})
        elif kind == "weight" and len(parts) >= 2:
            project = ".".join(parts[1:])
            mine = [k for k in quotas if k[0] == project]
            if not mine:
                raise BadChange(f"{c.key}: project {project} has no quota to weigh (set quota.{project}.<model>.gpus)")
            weight = _number(c, float, 1e-6)
            for k in mine:
                quotas[k] = dataclasses.replace(quotas[k], weight=weight)
        elif kind == "priority_class" and len(parts) >= 3 and parts[-1] == "priority":
            name = ".".join(parts[1:-1])
            if name not in classes:
                raise BadChange(f"{c.key}: no priority class {name} (there are: {', '.join(sorted(classes)) or 'none'})")
            classes[name] = int(_number(c, int, -100) or 0)
            if classes[name] > 100:
                raise BadChange(f"{c.key}: a priority is from -100 to 100")
        elif kind == "planner" and len(parts) == 2 and parts[1] in PLANNER_FIELDS:
            name = parts[1]
            if name == "empty_together":
                value = _flag(c)
            elif name in PLANNER_NUMBERS:
                kind_of, low, high, above = PLANNER_NUMBERS[name]
                value = _number(c, kind_of, low, none_ok=True, high=high, above=above)
            else:
                value = _seconds(c, none_ok=name != "fairshare_half_life")
            settings = dataclasses.replace(settings, **{name: value})
        else:
            raise BadChange(f"{c.key}: not a setting the what-if knows; give quota.<project>.<model>."
                            f"{{{','.join(QUOTA_FIELDS)}}}, weight.<project>, priority_class.<name>.priority "
                            f"or planner.{{{','.join(PLANNER_FIELDS)}}}")
    leases = history.leases
    if classes != history.priority_classes:   # a lease of a changed class takes its new priority
        leases = tuple(dataclasses.replace(x, priority=classes[x.priority_class])
                       if x.priority_class in classes and classes[x.priority_class] != history.priority_classes.get(x.priority_class)
                       else x for x in leases)
    return dataclasses.replace(history, quotas=quotas, priority_classes=classes, leases=leases), settings

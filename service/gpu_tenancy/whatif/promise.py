"""Promise rules for the replay (prototypes, off by default): which waiting
leases that were already told an ETA go before fair share, so that the ETA
holds. A promised lease gets priority PROMISED - ETA: the promised leases go
first, earliest ETA first, and the rest (fair share) fit around them.

  'eta'      every lease told an ETA is promised (conservative backfill in ETA order)
  'near'     only those whose ETA is within `horizon` seconds of now; the rest by fair share
  'shape'    fair share, but among the leases of one shape (GPUs per VM, VMs) those told an
             ETA take the places fair share gives that shape in the order of their ETAs
  'breach'   fair share, but a lease whose plan would start it more than `slack` seconds
             after its ETA is promised from then on (the plan is made again at once), so an
             ETA only moves earlier (or by at most the slack)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpu_tenancy.domain.model import LeaseRequest, PlannedLease

PROMISED = 2 ** 31   # above any ETA in epoch seconds: priority PROMISED - ETA orders by ETA
RULES = ("fairshare", "eta", "near", "shape", "breach")


def promised_ids(rule: str, told: Mapping[str, int], waiting: Iterable[str], now: int,
                 horizon: int = 0, breached: Iterable[str] = ()) -> set[str]:
    """The waiting leases that the rule puts before fair share, now."""
    ids = [i for i in waiting if i in told]
    if rule in ("fairshare", "eta", "shape"):
        return set(ids)
    if rule == "near":
        return {i for i in ids if told[i] - now <= horizon}
    if rule == "breach":
        return set(ids) & set(breached)
    raise ValueError(rule)


def with_promises(rule: str, waiting: list[LeaseRequest], told: Mapping[str, int],
                  promised: set[str]) -> list[LeaseRequest]:
    """The requests as the planner gets them: a promised lease before every other, and among
    themselves by fair share ('fairshare': all at priority 1) or by the ETA they were told."""
    return [r if r.lease_id not in promised else
            replace(r, priority=1 if rule == "fairshare" else PROMISED - told[r.lease_id])
            for r in waiting]


def breaches(planned: Mapping[str, PlannedLease], told: Mapping[str, int], promised: set[str],
             slack: int = 0) -> set[str]:
    """Leases told an ETA, not yet promised, that this plan starts more than `slack` seconds
    after that ETA (or not at all)."""
    out = set()
    for i, pl in planned.items():
        if i in told and i not in promised:
            eta = pl.eta
            if eta is None or eta > told[i] + slack:
                out.add(i)
    return out


def shape_order(ordered: list[LeaseRequest], told: Mapping[str, int]) -> list[LeaseRequest]:
    """'shape': `ordered` (fair-share order) with, within each shape, the leases told an ETA
    in ETA order in the places that shape's told leases had; the order made explicit by
    priorities (first = highest), so the planner keeps it."""
    places: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(ordered):
        if r.lease_id in told:
            places.setdefault((r.gpus_per_vm, r.instances), []).append(i)
    out = list(ordered)
    for idx in places.values():
        by_eta = sorted((ordered[i] for i in idx), key=lambda r: (told[r.lease_id], r.arrival, r.lease_id))
        for i, r in zip(idx, by_eta):
            out[i] = r
    n = len(out)
    return [replace(r, priority=n - i) for i, r in enumerate(out)]

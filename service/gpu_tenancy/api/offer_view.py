"""A counter-offer as the API shows it (engine/offers.py makes them): in the answers of
POST /v1/leases, with and without ?dry_run, beside the lease."""
from __future__ import annotations

from gpu_tenancy.engine.offers import Signed
from gpu_tenancy.timeutil import rfc3339

FIELDS = ("id", "kind", "summary", "shape", "gpu_model", "gpus_per_instance", "instances", "duration", "start",
          "end", "reserved", "borrowing", "expires_at")


def render(signed: Signed) -> dict:
    o = signed.offer
    return {"id": signed.id, "kind": o.kind.value, "summary": signed.words, "shape": o.shape,
            "gpu_model": o.gpu_model, "gpus_per_instance": o.gpus_per_vm, "instances": o.instances,
            "duration": o.duration, "start": rfc3339(o.start), "end": rfc3339(o.start + o.duration),
            "reserved": o.reserve, "borrowing": o.borrowing, "expires_at": rfc3339(signed.expires)}


def render_all(found: list[Signed]) -> list[dict]:
    return [render(s) for s in found]

"""openstack gpu lease shrink: make a lease shorter, on purpose.

`lease extend` never shortens (the API refuses a change that would, 409): a mistyped
extension must not cut a training run. Shortening is this command's alone."""
from __future__ import annotations

from gpu_tenancy.osc.lease import ExtendLease


class ShrinkLease(ExtendLease):
    _description = "Move a lease's end earlier (its VMs are deleted at the new end; the data volume stays)"
    sign, asks = -1, {"shrink": True}
    helps = ("the new, earlier end, RFC 3339", "the new, shorter duration from the lease's start: 12h, 1d, PT12H",
             "shorter by this much: 2h, PT2H")

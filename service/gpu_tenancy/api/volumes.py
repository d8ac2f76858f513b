"""/v1/volumes: a project's volumes as the cloud has them, and which lease uses
each; the ones free for a lease can be named in a new lease's "volume"."""
from __future__ import annotations

from flask import Blueprint
from flask.typing import ResponseReturnValue

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.scope import project_scope
from gpu_tenancy.engine import volumes

bp = Blueprint("volumes", __name__, url_prefix="/v1/volumes")


def render(entry: volumes.ProjectVolume) -> dict:
    v = entry.volume
    return {"id": v.id, "name": v.name, "size_gb": v.size_gb, "status": v.status,
            "attached_to": list(v.attached_to), "made_by_lease": v.lease_id, "lease_id": entry.lease_id,
            "free_for_a_lease": entry.free_for_a_lease}


@bp.get("")
def index() -> ResponseReturnValue:
    project = project_scope("volume:list", None)   # one project's volumes: the cloud lists by project
    with rt.transaction() as session:
        listed = volumes.listing(session, rt.runtime().cloud_driver(), project, rt.is_admin())
    return {"project_id": project, "volumes": [render(e) for e in listed]}

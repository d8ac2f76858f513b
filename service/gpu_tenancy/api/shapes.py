"""/v1/shapes: the GPU VM sizes on offer; admins add and retire them."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, url_for
from flask.typing import ResponseReturnValue

from gpu_tenancy.api.catalog import ENTRY_NAME, GPU_MODEL, CatalogEndpoints
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("shapes", __name__, url_prefix="/v1/shapes")

CREATE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "gpu_model", "gpus", "vcpus", "ram_mb", "disk_gb", "pci_alias"],
    "properties": {
        "name": ENTRY_NAME,
        "gpu_model": {**GPU_MODEL, "description": "the GPU model, as the hosts report it (A100)"},
        "gpus": {"type": "integer", "minimum": 1, "maximum": 16, "description": "GPUs per VM"},
        "vcpus": {"type": "integer", "minimum": 1, "maximum": 1024},
        "ram_mb": {"type": "integer", "minimum": 512, "maximum": 16 * 1024 * 1024},
        "disk_gb": {"type": "integer", "minimum": 0, "maximum": 65536, "description": "root disk"},
        "pci_alias": {**GPU_MODEL, "description": "the Nova PCI alias of the GPU model (nova.conf [pci] alias)"},
    },
}


def render(row: m.Shape) -> dict:
    return {"name": row.name, "gpu_model": row.gpu_model, "gpus": row.gpus, "vcpus": row.vcpus,
            "ram_mb": row.ram_mb, "disk_gb": row.disk_gb, "pci_alias": row.pci_alias,
            "created_at": rfc3339(to_epoch(row.created_at)), "retired_at": rfc3339(to_epoch(row.retired_at)),
            "links": [{"rel": "self", "href": url_for("shapes.show", name=row.name, _external=True)}]}


shapes = CatalogEndpoints("shape", m.Shape, render, CREATE, defaults={})


@bp.get("")
def index() -> ResponseReturnValue:
    return shapes.index()


@bp.get("/<name>")
def show(name: str) -> ResponseReturnValue:
    return shapes.show(name)


@bp.post("")
def create() -> ResponseReturnValue:
    return shapes.create()


@bp.delete("/<name>")
def retire(name: str) -> ResponseReturnValue:
    """Retiring stops new leases from asking for the shape; running leases keep going."""
    return shapes.retire(name)

"""/v1/images: the standard image catalog leases boot from; admins add and retire entries."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy.orm import object_session

from gpu_tenancy.api.catalog import ENTRY_NAME, CatalogEndpoints
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import to_epoch
from gpu_tenancy.engine import catalog
from gpu_tenancy.timeutil import rfc3339

bp = Blueprint("images", __name__, url_prefix="/v1/images")

CREATE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "cloud_ref"],
    "properties": {
        "name": ENTRY_NAME,
        "cloud_ref": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$",
                      "description": "the Glance image id"},
        "description": {"type": "string", "maxLength": 512, "pattern": r"^[^\x00-\x08\x0b-\x1f]*$"},
    },
}


def render(row: m.Image) -> dict:
    session = object_session(row)
    assert session is not None   # rendered while loaded
    return {"name": row.name, "cloud_ref": row.cloud_ref, "description": row.description,
            "default": row.name == catalog.default_image(session),
            "created_at": rfc3339(to_epoch(row.created_at)), "retired_at": rfc3339(to_epoch(row.retired_at)),
            "links": [{"rel": "self", "href": url_for("images.show", name=row.name, _external=True)}]}


images = CatalogEndpoints("image", m.Image, render, CREATE, defaults={"description": ""})


@bp.get("")
def index() -> ResponseReturnValue:
    return images.index()


@bp.get("/<name>")
def show(name: str) -> ResponseReturnValue:
    return images.show(name)


@bp.post("")
def create() -> ResponseReturnValue:
    return images.create()


@bp.delete("/<name>")
def retire(name: str) -> ResponseReturnValue:
    """Retiring stops new leases from choosing the image; leases that chose it keep it."""
    return images.retire(name)

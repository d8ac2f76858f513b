"""What the shape and image endpoints share: both are catalogs of named
entries that everyone may read and admins add to and retire."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import json_body, query_bool
from gpu_tenancy.engine import catalog

ENTRY_NAME = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9._-]{0,63}$"}
# a GPU model as the hosts report it (A100-80G); also the form of a Nova PCI alias
GPU_MODEL = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}


@dataclass(frozen=True)
class CatalogEndpoints:
    """Handlers' bodies for one catalog: `kind` names it in policy ("shape:list",
    "shape:manage"), in bodies ({"shape": ...}, {"shapes": [...]}) and in messages."""
    kind: str
    model: type
    render: Callable[[Any], dict]   # the model's row
    create_schema: dict
    defaults: dict

    def index(self) -> dict:
        rt.authorize(f"{self.kind}:list")
        include_retired = query_bool("include_retired")
        if include_retired:  # retired entries are an admin's concern
            rt.authorize(f"{self.kind}:manage")
        with rt.transaction() as session:
            return {f"{self.kind}s": [self.render(r) for r in catalog.entries(session, self.model, include_retired)]}

    def show(self, name: str) -> dict:
        rt.authorize(f"{self.kind}:list")
        with rt.transaction() as session:
            return {self.kind: self.render(catalog.get(session, self.model, name))}

    def create(self) -> tuple[dict, int, dict[str, str]]:
        rt.authorize(f"{self.kind}:manage")
        body = json_body(self.create_schema)
        with rt.transaction() as session:
            rendered = self.render(catalog.add(session, self.model, rt.now(), {**self.defaults, **body}))
            rt.audit(session, f"{self.kind}.create", rendered["name"], None, None, rendered)
        return {self.kind: rendered}, 201, {"Location": rendered["links"][0]["href"]}

    def retire(self, name: str) -> dict:
        rt.authorize(f"{self.kind}:manage")
        with rt.transaction() as session:
            before = self.render(catalog.get(session, self.model, name))
            row, in_use = catalog.retire(session, self.model, name, rt.now())
            after = self.render(row)
            rt.audit(session, f"{self.kind}.retire", name, None, before, after)
            return {self.kind: after,
                    "message": f"{self.kind} {name} is retired: new leases can no longer choose it; "
                               f"the {in_use} unfinished lease(s) that use it keep it until they end"}

"""Which project a per-project listing covers for the caller."""
from __future__ import annotations

from typing import overload

from flask import request

from gpu_tenancy.api import runtime as rt
from gpu_tenancy.api.validation import check_identifier


@overload
def project_scope(show_action: str, all_projects_action: None) -> str: ...
@overload
def project_scope(show_action: str, all_projects_action: str) -> str | None: ...


def project_scope(show_action: str, all_projects_action: str | None) -> str | None:
    """?project_id= if the caller may see it, else the caller's own project;
    None (every project) for a caller allowed all_projects_action who names none
    (no such action: a listing of one project at a time)."""
    wanted = request.args.get("project_id")
    if wanted is None and all_projects_action is not None and rt.allowed(all_projects_action):
        return None
    if wanted is not None:
        check_identifier("project_id", wanted)
    wanted = wanted or rt.context().project_id
    rt.authorize(show_action, wanted)
    return wanted

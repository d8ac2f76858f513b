"""bench/floor_app.py runs a create's captured statements again with a new lease id, name,
project and user: every place the template's values are in, text, JSON or nested, is changed,
and nothing else."""
from __future__ import annotations

import os
import sys
from datetime import datetime

from psycopg.types.json import Json, Jsonb

BENCH = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
sys.path.insert(0, BENCH)

from floor_app import swapped  # noqa: E402

OLD, NEW = "3f0c2d1e-0000-4000-8000-000000000001", "9a9a9a9a-1111-4111-8111-111111111111"


def test_each_value_of_the_template_is_swapped_wherever_it_is():
    at = datetime(2026, 12, 6, 8, 0, 0)
    parameters = {
        "p_lease_id": OLD, "p_lease_name": "floor-abc", "p_lease_project_id": "bench-0", "when": at, "n": 3,
        "p_recent": f'{{"fits": [["{OLD}", "bench-0", 4]]}}',
        "p_record_after": Jsonb({"lease": {"id": OLD, "links": [{"href": f"/v1/leases/{OLD}"}]}}),
        "p_hosts": Json([["gpu-a100-1", 2]]), "nested": [OLD, ("floor-abc", None)]}
    out = swapped(parameters, {OLD: NEW, "floor-abc": "floor-new", "bench-0": "bench-5"})
    assert out["p_lease_id"] == NEW and out["p_lease_name"] == "floor-new" and out["p_lease_project_id"] == "bench-5"
    assert out["when"] is at and out["n"] == 3   # not text: as it was
    assert out["p_recent"] == f'{{"fits": [["{NEW}", "bench-5", 4]]}}'
    assert isinstance(out["p_record_after"], Jsonb)
    assert out["p_record_after"].obj == {"lease": {"id": NEW, "links": [{"href": f"/v1/leases/{NEW}"}]}}
    assert isinstance(out["p_hosts"], Json) and out["p_hosts"].obj == [["gpu-a100-1", 2]]
    assert out["nested"] == [NEW, ("floor-new", None)]
    assert parameters["p_lease_id"] == OLD   # the template kept for the next request

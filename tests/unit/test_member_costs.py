"""bench/member_costs.py on small sizes: with fewer leases than projects (--waiting 5 on a few
hosts) no lease was bench-0's and the routes' setup ended in NoResultFound; the lease its
routes ask of is one of the caller's waiting ones, not one filling a host."""
from __future__ import annotations

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

import member_costs  # noqa: E402


@pytest.mark.parametrize("hosts, waiting", [(2, 5), (1, 1), (21, 2)])
def test_the_routes_ask_of_a_waiting_lease_of_the_callers_project(tmp_path, hosts, waiting):
    app, rt = member_costs.build(str(tmp_path), hosts, waiting, 3)
    try:
        client = app.test_client()
        paths = {what: path for what, _, path, _ in member_costs.routes(client, rt)}
        shown = client.get(paths["GET /v1/leases/{id}"], headers=member_costs.PROBE)
        assert shown.status_code == 200, shown.get_data(as_text=True)
        lease = shown.get_json()["lease"]
        assert lease["project_id"] == "bench-0" and lease["status"] == "queued"
        assert int(lease["name"].removeprefix("fill-")) > hosts   # after the leases filling the hosts
    finally:
        rt.sessions.kw["bind"].dispose()


@pytest.mark.parametrize("option", [["--waiting", "0"], ["--hosts", "0"], ["--rounds", "0"]])
def test_sizes_with_nothing_to_ask_of_are_refused_before_building(option, capsys):
    with pytest.raises(SystemExit) as exited:
        member_costs.main(option)
    assert exited.value.code == 2 and "must be at least 1" in capsys.readouterr().err

"""The real Blazar clients against the demo (a real process: noauth2, the simulated cloud):
python-blazarclient's `openstack reservation lease create|list|show|update|delete` with a
flavor reservation, and the API tests of blazar-tempest-plugin (gabbi files) that apply
to instance leases, run with gabbi against /reservation/v1.

The demo takes the identity from the token ("<project>:<user>"), which is all
blazarclient sends with auth type admin_token (api/auth.py: NoAuth2)."""
from __future__ import annotations

import copy
import importlib.util
import os
import time
import types
import unittest
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.blazar_cli import SHOWN_FORM, created, in_api_form, updated
from tests.conftest import PG_URL
from tests.demo_process import demo_process
from tests.openstack_cli import OpenStackCLI, require_openstack_client

pytestmark = pytest.mark.skipif(bool(PG_URL), reason="the demo runs on its own SQLite file; "
                                                     "once per suite is enough")


def require(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {module} is missing: install the `{extra}` extra")
    pytest.skip(f"{module} is not installed (pip install -e '.[{extra}]')")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    require_openstack_client()
    require("blazarclient", "test")
    # the tempest plugin's leases are in 2050: let the demo take starts that far ahead
    with demo_process(tmp_path_factory.mktemp("blazar-demo"), GPU_TENANCY_MAX_START_AHEAD_DAYS="18250") as base:
        yield base


def blazar_cli(demo: str, home: Path, token: str) -> OpenStackCLI:
    return OpenStackCLI(home, OS_AUTH_TYPE="admin_token", OS_ENDPOINT=demo + "/reservation/v1", OS_TOKEN=token)


def test_lease_create_list_show_update_delete_with_a_flavor_reservation(demo, tmp_path):
    cli = blazar_cli(demo, tmp_path, "ml-vision:alice")
    lease = created(cli, "--reservation",
                     "resource_type=flavor:instance,flavor_id=a100.x2,amount=2",
                     "--end-date", in_api_form(timedelta(days=1)), "blazar-first")
    assert lease["name"] == "blazar-first" and lease["status"] in ("PENDING", "STARTING", "ACTIVE")
    assert (lease["project_id"], lease["user_id"]) == ("ml-vision", "alice")
    deadline = time.monotonic() + 60
    while lease["status"] != "ACTIVE" and time.monotonic() < deadline:
        time.sleep(0.5)
        lease = cli.json("reservation", "lease", "show", lease["id"])
    assert lease["status"] == "ACTIVE"
    reservation = yaml.safe_load(lease["reservations"])    # the client shows it as JSON text
    assert reservation["resource_type"] == "flavor:instance" and reservation["amount"] == 2
    assert reservation["flavor_id"] and reservation["flavor_name"] == f"gt-lease-{lease['id']}"

    listed = cli.json("reservation", "lease", "list")
    assert [row["name"] for row in listed if row["id"] == lease["id"]] == ["blazar-first"]
    by_name = cli.json("reservation", "lease", "show", "blazar-first")    # the client finds it by name
    assert by_name["id"] == lease["id"]

    end = datetime.strptime(lease["end_date"], SHOWN_FORM)
    longer = updated(cli, lease["id"], "--prolong-for", "1d")
    assert datetime.strptime(longer["end_date"], SHOWN_FORM) == end.replace(second=0) + timedelta(days=1)
    shorter = updated(cli, lease["id"], "--end-date", in_api_form(timedelta(hours=12)))
    assert shorter["end_date"] < lease["end_date"]
    assert updated(cli, lease["id"], "--name", "blazar-renamed")["name"] == "blazar-renamed"
    refused = cli.run("reservation", "lease", "set", "--defer-by", "1h", lease["id"])
    assert refused.returncode != 0 and "start_date cannot be updated" in refused.stderr

    deleted = cli.run("reservation", "lease", "delete", lease["id"])
    assert deleted.returncode == 0, deleted.stderr
    assert cli.json("reservation", "lease", "show", lease["id"])["status"] in ("TERMINATING", "TERMINATED")

    later = created(cli, "--reservation",
                     "resource_type=flavor:instance,flavor_id=a100.x1,amount=1",
                     "--start-date", in_api_form(timedelta(days=2)), "--end-date", in_api_form(timedelta(days=3)),
                     "blazar-later")
    assert later["status"] == "PENDING" and yaml.safe_load(later["reservations"])["flavor_id"] is None
    assert cli.run("reservation", "lease", "delete", "blazar-later").returncode == 0
    gone = cli.run("reservation", "lease", "show", later["id"])
    assert gone.returncode != 0 and f"Object with {{'lease_id': '{later['id']}'}} not found" in gone.stderr


def test_the_client_shows_blazar_s_refusals(demo, tmp_path):
    cli = blazar_cli(demo, tmp_path, "ml-vision:bob")
    end = in_api_form(timedelta(hours=6))
    host = cli.run("reservation", "lease", "create", "--reservation",
                   "resource_type=physical:host,min=1,max=1", "--end-date", end,
                   "whole-host")
    assert host.returncode != 0 and "physical:host reservations are not offered here" in host.stderr
    full = created(cli, "--reservation",
                    "resource_type=flavor:instance,flavor_id=h100.x4,amount=1", "--end-date", end, "all-h100")
    assert full["status"] in ("PENDING", "STARTING", "ACTIVE")
    more = cli.run("reservation", "lease", "create", "--reservation",
                   "resource_type=flavor:instance,flavor_id=h100.x1,amount=1", "--end-date", end, "one-more")
    assert more.returncode != 0 and "Not enough hosts available" in more.stderr
    assert "one-more" not in [row["name"] for row in cli.json("reservation", "lease", "list")]


# --- blazar-tempest-plugin's API tests (gabbi) -----------------------------------------------
# Run: leases.yaml, as shipped and with its one lease given a flavor reservation (the only
# change). Not run: hosts.yaml and allocations.yaml (os-hosts and physical:host reservations,
# which gpu-tenancy does not offer: its hosts are the operator's, through /v1/hosts).
SHIPPED = {
    "post new lease with invalid time order": "pass",
    "post new lease with bogus start time": "pass",
    "post new lease without end_date": "pass",
    # a lease with no reservation: Blazar makes it, gpu-tenancy refuses it (400: it leases GPUs)
    "post new lease": "fail",
    "get new lease": "fail",      # follows from it: no lease to list ...
    "delete new lease": "fail",   # ... or to delete
    "get no lease": "pass",
}
NOT_RUN = {"hosts.yaml": "os-hosts (Blazar's host pool) is not offered",
           "allocations.yaml": "physical:host reservations and os-hosts allocations are not offered"}


def gabbits_dir() -> Path:
    require("blazar_tempest_plugin", "test")
    require("gabbi", "test")
    spec = importlib.util.find_spec("blazar_tempest_plugin.tests.api")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "gabbits"


def run_gabbits(directory: Path, base: str, token: str) -> dict[str, str]:
    """Each test's outcome (pass, fail), by its name in the file."""
    from gabbi import driver, fixture

    class AuthenticationFixture(fixture.GabbiFixture):   # the plugin's asks tempest for an admin token
        def start_fixture(self):
            os.environ["OS_TOKEN"] = token

        def stop_fixture(self):
            os.environ.pop("OS_TOKEN", None)
    fixtures = types.ModuleType("blazar_gabbi_fixtures")
    fixtures.AuthenticationFixture = AuthenticationFixture  # type: ignore[attr-defined]
    host, port = base.removeprefix("http://").split(":")
    suite = driver.build_tests(str(directory), unittest.defaultTestLoader, host=host, port=int(port),
                               fixture_module=fixtures, test_loader_name="blazar_tempest_plugin")
    cases = list(iter_cases(suite))     # before the run, which lets go of them
    result = unittest.TestResult()
    suite.run(result)
    bad = {t.id() for t, _ in result.failures + result.errors}
    names = {case.test_data["name"]: "fail" if case.id() in bad else "pass" for case in cases}
    assert not result.skipped and result.testsRun == len(names)
    return names


def iter_cases(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iter_cases(item)
        else:
            yield item


def test_blazar_tempest_plugin_lease_api_tests(demo, tmp_path):
    shipped = gabbits_dir() / "leases.yaml"
    assert {p.name for p in shipped.parent.glob("*.yaml")} == {"leases.yaml", *NOT_RUN}
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "leases.yaml").write_text(shipped.read_text())
    assert run_gabbits(tmp_path / "shipped", demo, "gabbi-shipped:tempest") == SHIPPED

    adapted = yaml.safe_load(shipped.read_text())
    [post] = [t for t in adapted["tests"] if t["name"] == "post new lease"]
    post["data"] = {**copy.deepcopy(post["data"]), "reservations": [
        {"resource_type": "flavor:instance", "flavor_id": "a100.x1", "amount": 1}]}
    (tmp_path / "adapted").mkdir()
    (tmp_path / "adapted" / "leases.yaml").write_text(yaml.safe_dump(adapted))
    # a project with an A100 quota and no other lease (the file counts the project's leases)
    assert run_gabbits(tmp_path / "adapted", demo, "nlp-lab:tempest") == dict.fromkeys(SHIPPED, "pass")

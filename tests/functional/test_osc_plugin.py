"""`openstack gpu ...` (the python-openstackclient plugin) against the demo
service started as a real process: noauth2, the simulated cloud, SQLite.
Every command runs as a subprocess and is judged by its JSON and exit code."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from tests.conftest import PG_URL
from tests.demo_process import demo_process
from tests.openstack_cli import OpenStackCLI, require_openstack_client

pytestmark = pytest.mark.skipif(bool(PG_URL), reason="the demo runs on its own SQLite file; "
                                                     "once per suite is enough")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    require_openstack_client()
    with demo_process(tmp_path_factory.mktemp("osc-demo")) as base:
        yield base


@pytest.fixture
def cli(demo, tmp_path):
    """The CLI as alice, a member of ml-vision, on the noauth2 demo."""
    return OpenStackCLI(tmp_path, OS_AUTH_TYPE="none", OS_ENDPOINT=demo,
                        OS_GPU_NOAUTH_PROJECT="ml-vision", OS_GPU_NOAUTH_USER="alice")


ADMIN = {"OS_GPU_NOAUTH_ROLES": "admin"}


def test_an_endpoint_given_with_the_apis_version_works(demo, tmp_path):
    """The demo prints the API as .../v1, and catalogs often version endpoints: with
    OS_ENDPOINT=.../v1 every command asked /v1/v1/... and answered a bare 404."""
    cli = OpenStackCLI(tmp_path, OS_AUTH_TYPE="none", OS_ENDPOINT=demo.rstrip("/") + "/v1/",
                       OS_GPU_NOAUTH_PROJECT="ml-vision", OS_GPU_NOAUTH_USER="alice")
    assert {row["GPU Model"] for row in cli.json("gpu", "capacity")} == {"A100", "H100"}


def test_capacity_shows_each_gpu_model_of_the_demo_cloud(cli):
    rows = {row["GPU Model"]: row for row in cli.json("gpu", "capacity")}
    assert rows["A100"]["Hosts"] == 4 and rows["A100"]["GPUs"] == 32 and rows["A100"]["Largest Free Block"] == 8
    assert rows["H100"]["Hosts"] == 2 and rows["H100"]["GPUs"] == 8
    calendar = cli.json("gpu", "capacity", "--start", "2030-01-01T00:00:00Z", "--end", "2030-01-02T00:00:00Z")
    hosts = {f"gpu-a100-{i}" for i in range(1, 5)} | {"gpu-h100-1", "gpu-h100-2"}
    assert {row["Host"] for row in calendar} == hosts
    assert all(row["Free"] == row["GPUs"] and row["Planned"] == 0 for row in calendar)   # nothing booked that far
    tomorrow = datetime.fromtimestamp(time.time() + 86400, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    from_now = cli.json("gpu", "capacity", "--start", "now", "--end", tomorrow)   # trap 9: 'now' was refused
    assert {row["Host"] for row in from_now} == hosts


def test_create_list_show_extend_cancel(cli):
    lease = cli.json("gpu", "lease", "create", "cli-first", "--shape", "a100.x2", "--duration", "PT24H",
                     "--volume-size", "100")
    assert lease["status"] == "scheduled" and lease["name"] == "cli-first"
    assert lease["project_id"] == "ml-vision" and lease["user_id"] == "alice"
    assert lease["volume"] == {"id": None, "size_gb": 100} and lease["allocations"][0]["gpus"] == 2

    listed = cli.json("gpu", "lease", "list")
    assert [row["Status"] for row in listed if row["ID"] == lease["id"]] in (["scheduled"], ["provisioning"])

    shown = cli.json("gpu", "lease", "show", "cli-first")   # by name
    assert shown["id"] == lease["id"] and shown["shape"] == "a100.x2"
    assert shown["boot"] == "service" and "flavor" in shown and "vms_free" in shown
    tenant = cli.json("gpu", "lease", "create", "cli-tenant", "--shape", "a100.x1", "--duration", "PT1H",
                      "--boot", "tenant")
    assert tenant["boot"] == "tenant" and tenant["image"] is None
    cli.run("gpu", "lease", "cancel", tenant["id"])
    value = cli.run("gpu", "lease", "show", lease["id"], "-f", "value", "-c", "name")
    assert value.returncode == 0 and value.stdout.strip() == "cli-first"

    extended = cli.json("gpu", "lease", "extend", lease["id"], "--by", "PT2H")
    assert extended["duration"] == 24 * 3600 + 2 * 3600
    months = cli.run("gpu", "lease", "extend", lease["id"], "--by", "P1M")
    assert months.returncode == 2 and "uses years or months" in months.stderr   # refused before asking
    too_long = cli.run("gpu", "lease", "extend", lease["id"], "--duration", "P30D")
    assert too_long.returncode == 1 and "maximum of 7 days" in too_long.stderr
    spare = cli.json("gpu", "lease", "create", "cli-spare", "--shape", "a100.x1", "--duration", "1h",
                     "--priority-class", "preemptible")
    assert (spare["priority_class"], spare["preemptible"]) == ("preemptible", True)
    cli.run("gpu", "lease", "cancel", spare["id"])
    cut = cli.run("gpu", "lease", "extend", lease["id"], "--duration", "P1D")   # 26 h -> 24 h: not by extend
    assert cut.returncode == 1 and "would shorten" in cut.stderr and "lease shrink" in cut.stderr
    assert cli.json("gpu", "lease", "show", lease["id"])["duration"] == 26 * 3600
    shrunk = cli.json("gpu", "lease", "shrink", lease["id"], "--by", "1h")
    assert shrunk["duration"] == 25 * 3600

    cancelled = cli.run("gpu", "lease", "cancel", lease["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert cli.json("gpu", "lease", "show", lease["id"])["status"] in ("cancelled", "ending", "ended")
    again = cli.run("gpu", "lease", "extend", lease["id"], "--by", "PT1H")
    assert again.returncode == 1 and "HTTP 409" in again.stderr


def test_create_wait_follows_the_events_until_active(cli):
    result = cli.run("gpu", "lease", "create", "cli-wait", "--shape", "a100.x1", "--duration", "PT1H",
                     "--wait", "-f", "json")
    assert result.returncode == 0, result.stderr
    lease = json.loads(result.stdout)
    assert lease["status"] == "active" and lease["servers"][0]["status"] == "ACTIVE"
    progress = result.stderr.splitlines()
    assert any("scheduled -> provisioning" in line for line in progress)
    assert any("provisioning -> active" in line for line in progress), result.stderr
    assert cli.run("gpu", "lease", "cancel", lease["id"]).returncode == 0


def test_create_wait_exits_non_zero_when_the_lease_is_cancelled(cli):
    nlp = {"OS_GPU_NOAUTH_PROJECT": "nlp-lab"}   # 16 A100 and nothing to borrow
    filler = cli.json("gpu", "lease", "create", "--shape", "a100.x8", "--instances", "2", "--duration", "PT1H",
                      **nlp)
    assert filler["status"] == "scheduled"
    waiting = cli.popen("gpu", "lease", "create", "cli-queued", "--shape", "a100.x8", "--duration", "PT1H",
                        "--wait", **nlp)
    try:
        deadline = time.monotonic() + 60
        while not [row for row in cli.json("gpu", "lease", "list", "--status", "queued", **nlp)
                   if row["Name"] == "cli-queued"]:
            assert time.monotonic() < deadline and waiting.poll() is None, "the lease was not queued"
            time.sleep(0.5)
        assert cli.run("gpu", "lease", "cancel", "cli-queued", **nlp).returncode == 0
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
        cli.run("gpu", "lease", "cancel", filler["id"], **nlp)
    assert waiting.returncode == 1
    assert "queued: position 1" in err and "queued -> cancelled" in err
    assert err.strip().endswith("was cancelled") and out == ""


def test_create_with_a_volume_not_the_projects_exits_non_zero_at_once(cli):
    """The volume is asked of the cloud when the lease is asked for (it failed the start before)."""
    result = cli.run("gpu", "lease", "create", "--shape", "a100.x1", "--duration", "PT1H",
                     "--volume", "0b6f3c5e-8c1d-4a57-9a43-5d1b9c2e7f10", "--wait")
    assert result.returncode == 1 and result.stdout == ""
    assert "volume 0b6f3c5e-8c1d-4a57-9a43-5d1b9c2e7f10 is not one of project ml-vision's volumes" in result.stderr
    assert "HTTP 400, gpu_tenancy.unknown_volume" in result.stderr


def test_quota_set_changes_only_the_limits_given(cli):
    denied = cli.run("gpu", "quota", "set", "cli-lab", "--gpu-model", "A100", "--gpus", "4")
    assert denied.returncode == 1 and "HTTP 403" in denied.stderr   # a member may not
    new = cli.run("gpu", "quota", "set", "cli-lab", "--gpu-model", "A100", "--weight", "2", **ADMIN)
    assert new.returncode == 1 and "has no A100 quota yet: give its gpus" in new.stderr
    assert cli.run("gpu", "quota", "set", "cli-lab", "--gpu-model", "A100", "--gpus", "4",
                   "--max-duration", "P1D", **ADMIN).returncode == 0
    assert cli.run("gpu", "quota", "set", "cli-lab", "--gpu-model", "A100", "--weight", "2",
                   **ADMIN).returncode == 0
    expected = [{"GPU Model": "A100", "GPUs": 4, "Borrow GPUs": 0, "Max Duration": "1 day", "Weight": 2.0}]
    assert cli.json("gpu", "quota", "show", "cli-lab", **ADMIN) == expected
    # a member of cli-lab sees its own quota without naming the project
    assert cli.json("gpu", "quota", "show", OS_GPU_NOAUTH_PROJECT="cli-lab") == expected
    assert cli.run("gpu", "quota", "set", "cli-lab", "--gpu-model", "A100", "--max-duration", "none",
                   **ADMIN).returncode == 0
    assert cli.json("gpu", "quota", "show", "cli-lab", **ADMIN)[0]["Max Duration"] is None


def test_a_bad_shape_is_a_clear_error_and_a_non_zero_exit(cli):
    result = cli.run("gpu", "lease", "create", "--shape", "a100.x3", "--duration", "PT1H")
    assert result.returncode == 1
    assert "unknown shape 'a100.x3'; the shapes offered are: a100.x1" in result.stderr
    assert "HTTP 400, gpu_tenancy.unknown_shape, request req-" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_noauth_without_a_project_and_an_unknown_lease_are_refused_plainly(cli):
    result = cli.run("gpu", "lease", "list", OS_GPU_NOAUTH_PROJECT="")
    assert result.returncode == 1 and "--os-gpu-noauth-project" in result.stderr
    missing = cli.run("gpu", "lease", "show", "no-such-lease")
    assert missing.returncode == 1 and "no lease with the id or name 'no-such-lease'" in missing.stderr


def test_lease_show_gives_the_network_addresses_and_a_ready_to_copy_ssh_line(cli):
    result = cli.run("gpu", "lease", "create", "cli-net", "--shape", "a100.x1", "--duration", "PT1H",
                     "--network", "ml-vision-net", "--floating-ip", "--wait", "-f", "json")
    assert result.returncode == 0, result.stderr
    lease = json.loads(result.stdout)
    assert lease["network"]["name"] == "ml-vision-net" and lease["floating_ip"] is True
    floating = [a["ip"] for a in lease["servers"][0]["addresses"] if a["kind"] == "floating"]
    assert len(floating) == 1 and lease["ssh"] == f"ssh ubuntu@{floating[0]}"
    table = cli.run("gpu", "lease", "show", lease["id"])
    assert table.returncode == 0, table.stderr
    assert f"ssh ubuntu@{floating[0]}" in table.stdout and "(floating on ml-vision-net)" in table.stdout
    refused = cli.run("gpu", "lease", "create", "cli-other", "--shape", "a100.x1", "--duration", "PT1H",
                      "--network", "nlp-lab-net")
    assert refused.returncode == 1 and "nlp-lab-net" in refused.stderr and "HTTP 400" in refused.stderr
    assert cli.run("gpu", "lease", "cancel", lease["id"]).returncode == 0


def test_a_dry_run_that_would_wait_shows_offers_and_accept_offer_takes_one(cli):
    project = {"OS_GPU_NOAUTH_PROJECT": "cli-offers"}
    for model in ("A100", "H100"):
        assert cli.run("gpu", "quota", "set", "cli-offers", "--gpu-model", model, "--gpus", "4",
                       **ADMIN).returncode == 0
    first = cli.json("gpu", "lease", "create", "--shape", "a100.x4", "--duration", "1d", **project)
    preview = cli.json("gpu", "lease", "create", "--shape", "a100.x4", "--duration", "12h", "--dry-run", **project)
    assert preview["queue"]["eta"] is not None   # waits for the project's A100 quota
    kinds = [o["kind"] for o in preview["offers"]]
    assert kinds[0] == "gpu_model" and kinds[-1] == "later", preview["offers"]
    table = cli.run("gpu", "lease", "create", "--shape", "a100.x4", "--duration", "12h", "--dry-run", **project)
    assert f"take it: --accept-offer {preview['offers'][0]['id'][:20]}" in table.stdout
    taken = cli.json("gpu", "lease", "create", "--shape", "a100.x4", "--duration", "12h",
                     "--accept-offer", preview["offers"][0]["id"], **project)
    assert (taken["shape"], taken["status"], taken["offers"]) == ("h100.x4", "scheduled", [])
    for lease in (first, taken):
        cli.run("gpu", "lease", "cancel", lease["id"], **project)

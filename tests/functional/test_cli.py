"""The two commands a new user runs: `gpu-tenancy db upgrade` and `gpu-tenancy demo`
(started as a real process, driven with HTTP as the README shows)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from gpu_tenancy.cli import main
from gpu_tenancy.timeutil import parse_time
from tests.conftest import PG_URL, RELEASE
from tests.ports import free_port
from tests.process_group import process_group, stop


def test_db_upgrade_makes_the_schema(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["db", "upgrade", "--db", url]) == 0
    assert "latest schema" in capsys.readouterr().out
    tables = set(inspect(create_engine(url)).get_table_names())
    assert {"leases", "allocations", "events", "quotas", "shapes", "images", "hosts", "locks"} <= tables


def audit_records(url: str, ages_in_days: list[float]) -> None:
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import make_engine, make_sessionmaker, session_scope, utcnow_naive
    now, engine = time.time(), make_engine(url)
    with session_scope(make_sessionmaker(engine)) as session:
        session.add_all([m.AuditRecord(at=utcnow_naive(int(now - age * 86400)), action="quota.update",
                                       target_type="quota", target_id="ml-vision", outcome="success")
                         for age in ages_in_days])
    engine.dispose()


def test_db_purge_deletes_the_old_rows_and_says_how_many_of_each(db_url, capsys):
    audit_records(db_url, [90, 60, 45, 10, 0])
    assert main(["db", "purge", "--db", db_url, "--older-than-days", "30"]) == 0
    head, *counts = capsys.readouterr().out.splitlines()
    assert head.startswith(f"purged from {db_url} the rows older than ")
    assert [line.rsplit(None, 1) for line in counts] == [["  webhook deliveries", "0"], ["  bus notices", "0"],
                                                          ["  audit records", "3"], ["  dashboard logins", "0"]]
    assert main(["db", "purge", "--db", db_url, "--before", "2000-01-01"]) == 0
    assert "audit records        0" in capsys.readouterr().out


@pytest.mark.parametrize("cutoff, words", [
    (["--older-than-days", "0"], "less than a day ago"), (["--older-than-days", "-3"], "in the future"),
    (["--before", "9000-01-01"], "in the future"), (["--before", "last week"], "not an RFC 3339 time"),
    ([], "give the cutoff: --before DATE or --older-than-days N")])
def test_db_purge_refuses_a_cutoff_in_the_future_too_recent_or_missing(db_url, capsys, cutoff, words):
    audit_records(db_url, [0.5, 0])
    assert main(["db", "purge", "--db", db_url, *cutoff]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--older-than-days", "30"], ["--vacuum"]])
def test_a_cutoff_given_to_db_upgrade_is_refused_not_ignored(db_url, capsys, option):
    assert main(["db", "upgrade", "--db", db_url, *option]) == 2
    assert "--before, --older-than-days and --vacuum go with purge, not upgrade" in capsys.readouterr().err


def test_db_purge_vacuum_says_it_vacuumed_after_the_counts(db_url, capsys):
    audit_records(db_url, [90, 0])
    assert main(["db", "purge", "--db", db_url, "--older-than-days", "30", "--vacuum"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3].rsplit(None, 1) == ["  audit records", "1"]
    assert out[-1] == ("vacuumed the file" if db_url.startswith("sqlite") else
                       "vacuumed and analyzed webhook_deliveries, bus_notices, audit_records, dashboard_sessions")


def test_db_purge_on_a_database_without_the_schema_says_so_in_a_line(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main(["db", "purge", "--db", url, "--older-than-days", "30"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-tenancy db purge: cannot purge the database at {url}: no such table")
    assert "gpu-tenancy db upgrade" in err and "Traceback" not in err


def call(method, url, body=None, project="ml-vision"):
    headers = {"X-Project-Id": project, "X-User-Id": "alice", "X-Roles": "member",
               "Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method=method),
                                timeout=10) as response:
        return response.status, json.loads(response.read())


@pytest.mark.skipif(bool(PG_URL), reason="the demo runs on its own SQLite file; once per suite is enough")
def test_demo_starts_and_a_lease_from_the_readme_becomes_active(tmp_path):
    port = free_port()
    with process_group([sys.executable, "-m", "gpu_tenancy.cli", "demo", "--port", str(port),
                        "--db", f"sqlite:///{tmp_path / 'demo.db'}"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        try:
            lease_and_queue(f"http://127.0.0.1:{port}")
        finally:
            # the stop gives the engine's pass under way engine_stop_seconds (15 s), then leaves it
            out, _ = stop(proc, 90, "the demo")
    assert f"curl -s -X POST http://127.0.0.1:{port}/v1/leases" in out
    assert proc.returncode == 0


def lease_and_queue(base: str) -> None:
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    status, body = call("POST", base + "/v1/leases", {"name": "first", "shape": "a100.x2",
                                                      "duration": "PT24H", "volume": {"size_gb": 100}})
    assert status == 201 and body["lease"]["status"] == "scheduled"
    lease_url = body["lease"]["links"][0]["href"]
    deadline = time.time() + 60
    while time.time() < deadline:
        lease = call("GET", lease_url)[1]["lease"]
        if lease["status"] == "active":
            break
        time.sleep(1)
    assert lease["status"] == "active"
    assert lease["servers"][0]["status"] == "ACTIVE"
    filler = call("POST", base + "/v1/leases", {"shape": "a100.x8", "instances": 2, "duration": "PT1H"},
                  project="nlp-lab")[1]["lease"]
    assert filler["status"] == "scheduled"
    queued = call("POST", base + "/v1/leases", {"shape": "a100.x8", "duration": "PT1H"},
                  project="nlp-lab")[1]["lease"]
    assert queued["status"] == "queued" and queued["queue"]["position"] == 1
    # it waits for the lease before it to end, and for the cloud to release its GPUs
    assert parse_time(queued["queue"]["eta"]) == parse_time(filler["end"]) + RELEASE
    assert queued["queue"]["reasons"]


@pytest.mark.skipif(bool(PG_URL), reason="the demo runs on its own SQLite file; once per suite is enough")
def test_a_demo_whose_port_is_taken_says_so_and_shows_no_url(tmp_path):
    """It printed its banner (the URLs, the curl lines: another program's there) and only then
    found the port taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "gpu_tenancy.cli", "demo", "--port", str(port),
                               "--db", f"sqlite:///{tmp_path / 'demo.db'}"], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    assert f"Port {port} is in use" in proc.stderr
    assert "curl" not in proc.stdout and f":{port}" not in proc.stdout


def test_whatif_on_a_database_without_the_schema_says_so_in_a_line(tmp_path, capsys):
    """`gpu-tenancy demo` keeps its leases in gpu-tenancy-demo.db, `whatif` reads the config's
    database (gpu-tenancy.db by default): run after the demo, it found no leases table and
    ended in SQLAlchemy's traceback."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main(["whatif", "--db", url, "--days", "1", "--set", "weight.ml-vision=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-tenancy whatif: cannot read the lease history at {url}: no such table: leases")
    assert "--db" in err and "gpu-tenancy-demo.db" in err


@pytest.mark.parametrize("command", [["db", "upgrade"], ["engine"], ["whatif", "--set", "weight.ml-vision=2"]])
def test_a_config_file_missing_or_wrong_is_one_line_and_exit_2(tmp_path, capsys, command):
    missing = tmp_path / "missing.yaml"
    assert main([*command, "--config", str(missing)]) == 2
    assert f"gpu-tenancy {command[0]}: the config {missing}: [Errno 2] No such file" in capsys.readouterr().err
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("databse_url: sqlite:///x.db\n")
    assert main([*command, "--config", str(wrong)]) == 2
    assert "unknown configuration options: databse_url" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["db", "upgrade"], ["engine"], ["whatif", "--set", "weight.ml-vision=2"]])
def test_without_config_the_file_gpu_tenancy_config_names_is_read(tmp_path, capsys, monkeypatch, command):
    """As the API's workers read it (wsgi.py): exported for gunicorn, it was ignored by `db upgrade`
    and `engine`, which ran on ./gpu-tenancy.db and the simulated cloud without a word."""
    monkeypatch.chdir(tmp_path)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("databse_url: sqlite:///x.db\n")
    monkeypatch.setenv("GPU_TENANCY_CONFIG", str(wrong))
    assert main(command) == 2
    assert f"the config {wrong}: unknown configuration options: databse_url" in capsys.readouterr().err
    assert not (tmp_path / "gpu-tenancy.db").exists()


@pytest.mark.parametrize("text", ["- database_url: sqlite:///x.db\n", "database_url sqlite:///x.db\n"])
def test_a_config_file_that_is_not_a_mapping_says_what_to_write(tmp_path, capsys, text):
    """A list or a bare string was told as dict.update's "dictionary update sequence element #0
    has length 1; 2 is required"."""
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text)
    assert main(["db", "upgrade", "--config", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert "dictionary update" not in err and "not the options: write one `name: value` per line" in err


@pytest.mark.parametrize("name, value, kind", [("MAX_WAITING_LEASES_PER_USER", "lots", "a whole number"),
                                               ("WEBHOOK_TIMEOUT_SECONDS", "5s", "a number")])
def test_a_variable_that_is_not_a_number_is_named(capsys, monkeypatch, name, value, kind):
    """It was int()'s words alone: "invalid literal for int() with base 10: 'lots'"."""
    monkeypatch.setenv("GPU_TENANCY_" + name, value)
    assert main(["engine"]) == 2
    assert f"GPU_TENANCY_{name}='{value}': {name.lower()} must be {kind}" in capsys.readouterr().err


@pytest.mark.skipif(bool(PG_URL), reason="an SQLite file of its own")
@pytest.mark.parametrize("revision, words", [(None, "has no schema"), ("0031", "is at revision 0031_leases_created_index, not ")])
def test_the_engine_on_a_database_not_upgraded_says_so_and_exits_2(tmp_path, capsys, monkeypatch, revision, words):
    """Started before `db upgrade` (a fresh machine, or a new release's code), the engine ran and
    logged a traceback each tick ("no such table: locks"), for ever."""
    from gpu_tenancy.db import migrate
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    if revision:
        [older] = [r for r in ScriptDirectory.from_config(migrate.alembic_config("")).walk_revisions()
                   if r.revision.startswith(revision)]
        migrate.upgrade(url, older.revision)
    config = tmp_path / "gpu-tenancy.yaml"
    config.write_text(f"database_url: {url}\ncloud_driver: simulated\n")
    monkeypatch.setattr("gpu_tenancy.cli.wait_for", lambda stop: None)   # an engine let through stops at once
    assert main(["engine", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-tenancy engine: the database at {url} {words}")
    assert err.endswith(": run gpu-tenancy db upgrade first\n")


def test_the_engine_on_an_upgraded_database_starts(db_url, tmp_path, monkeypatch):
    config = tmp_path / "gpu-tenancy.yaml"
    config.write_text(f"database_url: {db_url}\ncloud_driver: simulated\n")
    monkeypatch.setattr("gpu_tenancy.cli.wait_for", lambda stop: None)
    assert main(["engine", "--config", str(config)]) == 0


@pytest.mark.parametrize("command", [["db", "upgrade"], ["db", "current"], ["whatif", "--set", "weight.x=2"]])
@pytest.mark.parametrize("url, shown, reason", [
    ("nosuch://u:secret@db/x", "nosuch://u:***@db/x", "Can't load plugin: sqlalchemy.dialects:nosuch"),
    ("postgres ql://u:secret@db/x", "***@db/x", "not a database URL such as postgresql+psycopg://"),
    ("sqlite:///{tmp}/no/such/dir/x.db", "sqlite:///{tmp}/no/such/dir/x.db", "unable to open database file"),
])
def test_a_database_url_that_cannot_be_used_is_one_line_and_exit_2(tmp_path, capsys, command, url, shown, reason):
    """`db upgrade --db` with a mistyped scheme, a URL that is not one or a directory that does
    not exist ended in SQLAlchemy's traceback (exit 1), as did `whatif` and `demo`; a URL
    SQLAlchemy cannot parse it quotes whole, password included."""
    url, shown = url.format(tmp=tmp_path), shown.format(tmp=tmp_path)
    assert main([*command, "--db", url]) == 2
    err = capsys.readouterr().err
    # whatif says it of the lease history when the database opens but cannot be read
    said = rf"gpu-tenancy {command[0]}: cannot (use the database|read the lease history) at {re.escape(shown)}: "
    assert re.match(said + re.escape(reason), err), err
    assert "secret" not in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["db", "upgrade"], ["db", "current"], ["db", "purge", "--older-than-days", "30"],
                                     ["whatif", "--set", "weight.x=2"]])
def test_a_database_whose_driver_is_not_installed_is_one_line_and_exit_2(capsys, monkeypatch, command):
    """postgresql+psycopg2:// where only psycopg 3, the service's driver, is installed: the
    import's traceback, exit 1 (`engine` the same, through its config)."""
    import builtins
    real_import = builtins.__import__

    def without_psycopg2(name, *args, **kwargs):
        if name == "psycopg2" or name.startswith("psycopg2."):
            raise ModuleNotFoundError("No module named 'psycopg2'", name="psycopg2")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", without_psycopg2)
    assert main([*command, "--db", "postgresql+psycopg2://u:secret@db/x"]) == 2
    err = capsys.readouterr().err
    assert err == (f"gpu-tenancy {command[0]}: cannot use the database at postgresql+psycopg2://u:***@db/x: its "
                   "driver is not installed (No module named 'psycopg2'); the service's is postgresql+psycopg://\n")


@pytest.mark.parametrize("action", ["register", "unregister"])
def test_a_cloud_that_cannot_be_used_is_one_line_and_exit_2(tmp_path, capsys, action):
    """`reservation-endpoint` with a cloud clouds.yaml lacks, or whose Keystone is down, ended
    in openstacksdk's or keystoneauth's traceback."""
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text("clouds:\n  down:\n    auth:\n      auth_url: http://127.0.0.1:%d/v3\n"
                      "      username: admin\n      password: pw\n      project_name: admin\n"
                      "      user_domain_name: Default\n      project_domain_name: Default\n" % free_port())
    url = ["--url", "https://gpu.example.org/reservation/v1"] if action == "register" else []
    for cloud, reason in (("nosuch", "Cloud nosuch was not found"), ("down", "Unable to establish connection")):
        argv = ["reservation-endpoint", action, "--os-cloud", cloud, "--clouds-yaml", str(clouds), *url]
        assert main(argv) == 2
        assert f"gpu-tenancy reservation-endpoint: cloud {cloud}: {reason}" in capsys.readouterr().err


def test_register_without_its_url_says_so_before_connecting(capsys):
    assert main(["reservation-endpoint", "register", "--os-cloud", "nosuch"]) == 2
    assert capsys.readouterr().err == "--url must be the service's URL ending in /reservation/v1\n"


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_a_demo_port_that_is_not_one_is_refused_by_the_parser(port, capsys, monkeypatch):
    """`demo --port 99999` listened on 34463 (the socket took it modulo 65536) while its banner
    told the user to curl :99999."""
    monkeypatch.setattr("gpu_tenancy.cli.run_demo", lambda args: 0)   # a port let through starts nothing
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--port", port])
    assert exit_.value.code == 2 and f"argument --port: '{port}' is not a TCP port" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["whatif", "--set", "weight.x=2", "--days"], ["demo", "--history-days"]])
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "a week"])
def test_a_number_of_days_that_is_not_one_is_refused_by_the_parser(argv, value, capsys, monkeypatch):
    """`whatif --days inf` ended in a traceback (exit 1), `--days nan` in "cannot convert float
    NaN to integer", `--days -1` replayed an empty window; `demo --history-days` the same."""
    monkeypatch.setattr("gpu_tenancy.cli.run_demo", lambda args: 0)   # let through, it starts nothing
    monkeypatch.setattr("gpu_tenancy.cli.run_whatif", lambda args: 0)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, value])
    assert exit_.value.code == 2
    assert f"argument {argv[-1]}: '{value}' is not a number of days: give one more than 0" in capsys.readouterr().err

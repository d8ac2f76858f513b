"""`openstack --os-cloud ... gpu ...` with real Keystone tokens: the plugin finds
the service in the loopback cloud's catalog (type gpu, http://127.0.0.1:8779),
so the service listens there, with keystone auth and the simulated cloud (no
GPU of the loopback cloud is used)."""
from __future__ import annotations

import os
import threading
import time

import pytest
from werkzeug.serving import make_server

from gpu_tenancy.app import create_app
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.demo.seed import seed
from gpu_tenancy.timeutil import rfc3339
from tests.integration.conftest import CLOUDS
from tests.openstack_cli import OpenStackCLI, require_openstack_client


def ahead() -> str:
    """A start half a year ahead: within the service's max_start_ahead_days, nothing boots."""
    return rfc3339(int(time.time()) + 180 * 86400)

CATALOG_PORT = 8779   # the loopback catalog's endpoint of the gpu service


@pytest.fixture
def catalog_service(keystone_config):
    require_openstack_client()
    app = create_app(keystone_config, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, runtime.clock.now(), runtime.cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    try:
        server = make_server("127.0.0.1", CATALOG_PORT, app, threaded=True)
    except OSError as exc:
        message = f"port {CATALOG_PORT} of the catalog's gpu endpoint is taken: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield
    server.shutdown()
    thread.join(timeout=10)
    runtime.sessions.kw["bind"].dispose()


def test_the_catalog_endpoint_and_keystone_tokens_decide_who_sees_what(catalog_service, projects, tmp_path):
    cli = OpenStackCLI(tmp_path, OS_CLIENT_CONFIG_FILE=CLOUDS)
    a = projects["tenant-a"]
    denied = cli.run("--os-cloud", "gt-alice", "gpu", "quota", "set", a, "--gpu-model", "A100", "--gpus", "4")
    assert denied.returncode == 1 and "HTTP 403" in denied.stderr
    admin = cli.run("--os-cloud", "gt-admin", "gpu", "quota", "set", a, "--gpu-model", "A100", "--gpus", "4")
    assert admin.returncode == 0, admin.stderr
    # alice's project comes from her token
    assert cli.json("--os-cloud", "gt-alice", "gpu", "quota", "show")[0]["GPUs"] == 4

    lease = cli.json("--os-cloud", "gt-alice", "gpu", "lease", "create", "cli-keystone", "--shape", "a100.x1",
                     "--duration", "PT1H", "--start", ahead())
    assert lease["project_id"] == a and lease["status"] == "scheduled"
    assert [row["ID"] for row in cli.json("--os-cloud", "gt-alice", "gpu", "lease", "list")] == [lease["id"]]
    assert cli.json("--os-cloud", "gt-rita", "gpu", "lease", "show", "cli-keystone")["id"] == lease["id"]
    reader = cli.run("--os-cloud", "gt-rita", "gpu", "lease", "cancel", lease["id"])
    assert reader.returncode == 1 and "HTTP 403" in reader.stderr
    assert cli.json("--os-cloud", "gt-bob", "gpu", "lease", "list") == []
    other = cli.run("--os-cloud", "gt-bob", "gpu", "lease", "show", lease["id"])
    assert other.returncode == 1 and "no lease with the id or name" in other.stderr

    # the override wins over the catalog: nothing listens on this port
    moved = cli.run("--os-cloud", "gt-alice", "--os-gpu-endpoint-override", "http://127.0.0.1:18949",
                    "gpu", "lease", "list")
    assert moved.returncode == 1 and "cannot reach gpu-tenancy" in moved.stderr
    assert cli.run("--os-cloud", "gt-alice", "gpu", "lease", "cancel", lease["id"]).returncode == 0
    assert cli.json("--os-cloud", "gt-alice", "gpu", "lease", "show", lease["id"])["status"] == "cancelled"

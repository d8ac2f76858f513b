"""python-blazarclient with real Keystone tokens finds the Blazar-compatible API through
the loopback cloud's catalog: `gpu-tenancy reservation-endpoint register` puts it there
as type `reservation`, in a region of its own (every other client of the shared cloud
asks for RegionOne and never sees it), and `unregister` takes it out after. The service
runs with keystone auth and the simulated cloud: its leases start half a year ahead,
and no GPU of the loopback cloud is used."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from werkzeug.serving import make_server

from gpu_tenancy import cli as service_cli
from gpu_tenancy.app import create_app
from gpu_tenancy.cloud.openstack import reservation_catalog
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope, utcnow_naive
from gpu_tenancy.demo.seed import seed
from tests.blazar_cli import SHOWN_FORM, created, in_api_form, updated
from tests.integration.conftest import CLOUDS
from tests.openstack_cli import OpenStackCLI, require_openstack_client
from tests.ports import free_port

AHEAD = timedelta(days=180)


def endpoint_command(action: str, region: str, *extra: str) -> int:
    return service_cli.main(["reservation-endpoint", action, "--region", region, "--os-cloud", "gt-admin",
                             "--clouds-yaml", CLOUDS, *extra])


def with_region(tmp_path: Path, region: str) -> str:
    """A copy of the loopback clouds.yaml whose clouds know the test's region too
    (openstacksdk refuses a region a cloud does not list)."""
    config = yaml.safe_load(Path(CLOUDS).read_text())
    for cloud in config["clouds"].values():
        cloud["regions"] = [cloud.pop("region_name", "RegionOne"), region]
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def region(admin):
    name = f"gt-blazar-{uuid.uuid4().hex[:8]}"
    yield name
    endpoint_command("unregister", name)
    admin.identity.delete_region(name, ignore_missing=True)
    assert not [ep for ep in admin.identity.endpoints(region_id=name)]


@pytest.fixture
def reservation_url(keystone_config, projects, region):
    require_openstack_client()
    app = create_app(keystone_config, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, runtime.clock.now(), runtime.cloud.images())
        session.add(m.Quota(project_id=projects["tenant-a"], gpu_model="A100", gpus=4, borrow_gpus=0,
                            max_duration=7 * 86400, weight=1.0, updated_at=utcnow_naive(runtime.clock.now())))
    runtime.engine.lifecycle.refresh_hosts()
    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/reservation/v1"
    try:
        assert endpoint_command("register", region, "--url", url) == 0
        assert endpoint_command("register", region, "--url", url) == 0     # again: nothing new
        yield url
    finally:
        server.shutdown()
        thread.join(timeout=10)
        runtime.sessions.kw["bind"].dispose()


def test_the_catalog_s_reservation_endpoint_serves_blazarclient_with_keystone_tokens(
        admin, reservation_url, region, projects, tmp_path):
    ours = next(iter(admin.identity.services(name=reservation_catalog.SERVICE_NAME)))
    assert ours.type == "reservation"
    assert sorted(ep.interface for ep in admin.identity.endpoints(service_id=ours.id, region_id=region)) == \
        ["admin", "internal", "public"]
    clouds = with_region(tmp_path, region)

    def as_(cloud: str) -> OpenStackCLI:
        return OpenStackCLI(tmp_path, OS_CLIENT_CONFIG_FILE=clouds, OS_REGION_NAME=region, OS_CLOUD=cloud)
    alice, bob, rita = as_("gt-alice"), as_("gt-bob"), as_("gt-rita")

    lease = created(alice, "--reservation", "resource_type=flavor:instance,flavor_id=a100.x1,amount=1",
                    "--start-date", in_api_form(AHEAD), "--end-date", in_api_form(AHEAD + timedelta(days=1)),
                    "kc-blazar")
    assert lease["project_id"] == projects["tenant-a"] and lease["status"] == "PENDING"
    assert [row["id"] for row in alice.json("reservation", "lease", "list")] == [lease["id"]]
    assert rita.json("reservation", "lease", "show", "kc-blazar")["id"] == lease["id"]   # a reader of tenant-a
    assert bob.json("reservation", "lease", "list") == []
    hidden = bob.run("reservation", "lease", "show", lease["id"])
    assert hidden.returncode != 0 and "not found" in hidden.stderr
    denied = rita.run("reservation", "lease", "delete", lease["id"])
    assert denied.returncode != 0 and "policy does not allow lease:delete" in denied.stderr

    longer = updated(alice, lease["id"], "--prolong-for", "2h")
    assert (datetime.strptime(longer["end_date"], SHOWN_FORM)
            - datetime.strptime(lease["end_date"], SHOWN_FORM)).total_seconds() == 2 * 3600
    assert alice.run("reservation", "lease", "delete", lease["id"]).returncode == 0
    gone = alice.run("reservation", "lease", "show", lease["id"])
    assert gone.returncode != 0 and "not found" in gone.stderr

    # RegionOne, where everyone else's clients look, has no reservation endpoint of ours
    elsewhere = alice.run("reservation", "lease", "list", OS_REGION_NAME="RegionOne")
    assert elsewhere.returncode != 0 and "reservation" in elsewhere.stderr, elsewhere.stderr

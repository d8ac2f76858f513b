"""Integration tests against the real OpenStack services of the loopback cloud
(scripts/loopback/start.sh): Keystone, Placement, Nova with three fake-GPU
hosts, Glance and Cinder. Nothing of OpenStack is mocked.

GT_LOOPBACK_CLOUDS names the loopback cloud's clouds.yaml. Without it these
tests are skipped, except in CI (CI=true), where that is an error.

The cloud is shared by every test, so each test ends what it started and
waits until Placement has released the GPUs (the `clean_cloud` fixture checks
it before and after each test)."""
from __future__ import annotations

import base64
import configparser
import os
import time

import pytest
from cryptography.fernet import Fernet
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import VirtualClock
from gpu_tenancy.cloud.driver import LEASE_TAG
from gpu_tenancy.cloud.openstack import OpenStackCloud
from gpu_tenancy.cloud.openstack.connection import connect
from gpu_tenancy.config import Config
from gpu_tenancy.db.session import session_scope

CLOUDS = os.environ.get("GT_LOOPBACK_CLOUDS")
# the loopback cloud's state dir (scripts/loopback/lib.sh): where its config files are, beside its clouds.yaml
LOOPBACK_DIR = os.environ.get("GT_LOOPBACK_DIR") or (os.path.dirname(os.path.abspath(CLOUDS)) if CLOUDS else None)
KEYSTONE = "http://127.0.0.1:5000/v3"
HOSTS = {"gpu-a100-1": ("A100", 4), "gpu-a100-2": ("A100", 4), "gpu-h100-1": ("H100", 2)}
SHAPES = [("a100.x1", "A100", 1, "a100"), ("a100.x2", "A100", 2, "a100"), ("a100.x4", "A100", 4, "a100"),
          ("h100.x1", "H100", 1, "h100")]


def pytest_collection_modifyitems(config, items):
    ours = [item for item in items if "tests/integration/" in str(item.fspath).replace(os.sep, "/")]
    if CLOUDS or not ours:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError("CI=true but GT_LOOPBACK_CLOUDS is not set: the loopback cloud did not start")
    skip = pytest.mark.skip(reason="no loopback cloud (start it with scripts/loopback/start.sh and set "
                                   "GT_LOOPBACK_CLOUDS to its clouds.yaml)")
    for item in ours:
        item.add_marker(skip)


def wait_for(what: str, check, timeout: float = 120, every: float = 0.5, detail=None):
    """Poll check() until it returns something true; fail with `what` after timeout seconds,
    and with what detail() says of the state then (so that a timeout in CI tells where it stood)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}" + (f"; {detail()}" if detail else ""))
        time.sleep(every)


@pytest.fixture(scope="session")
def admin():
    conn = connect("gt-admin", CLOUDS)
    require_every_compute_up(conn)
    return conn


def require_every_compute_up(conn, timeout: float = 60) -> None:
    """Every test assumes the three hosts: a nova-compute that died before the run
    (it has happened, leaving its pid file) would show as puzzling failures later."""
    def down():
        state = {s.host: s.state for s in conn.compute.services() if s.binary == "nova-compute"}
        return {host: state.get(host, "missing") for host in HOSTS if state.get(host) != "up"}
    deadline = time.monotonic() + timeout
    while (missing := down()) and time.monotonic() < deadline:
        time.sleep(2)
    if missing:
        pytest.fail("the loopback cloud is not whole: nova-compute "
                    + ", ".join(f"{h} is {s}" for h, s in sorted(missing.items()))
                    + " (scripts/loopback/compute.sh start <host>)", pytrace=False)


@pytest.fixture(scope="session")
def projects(admin):
    return {name: admin.identity.find_project(name, ignore_missing=False).id for name in ("tenant-a", "tenant-b")}


@pytest.fixture(scope="session")
def image_id(admin):
    return admin.image.find_image("ubuntu-22.04", ignore_missing=False).id


# the GPU hosts' isolated aggregates require it (scripts/loopback/bootstrap.py isolation)
ISOLATION_SPECS = {"trait:CUSTOM_GPU_TENANCY": "required"}


@pytest.fixture(scope="session")
def bus_url() -> str:
    """The loopback cloud's RabbitMQ, as its Nova is configured with it (scripts/loopback/configure.sh)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)   # multi-valued options ([pci])
    path = os.path.join(LOOPBACK_DIR or "", "etc", "nova", "nova.conf")
    if not parser.read(path) or not parser.get("DEFAULT", "transport_url", fallback=None):
        pytest.fail(f"no transport_url in {path}: set GT_LOOPBACK_DIR to the loopback cloud's state dir")
    return parser.get("DEFAULT", "transport_url")


@pytest.fixture(scope="session")
def os_cloud():
    return OpenStackCloud(connect("gt-service", CLOUDS), resource_classes={}, network="none",
                          flavor_extra_specs=ISOLATION_SPECS)


def gpu_usage(admin) -> dict[str, int]:
    """GPUs allocated in Placement per host (root provider name)."""
    used: dict[str, int] = {}
    providers = list(admin.placement.resource_providers())
    names = {rp.id: rp.name for rp in providers}
    for rp in providers:
        if rp.parent_provider_id:
            usages = admin.placement.fetch_resource_provider_usages(rp).usages or {}
            n = sum(v for k, v in usages.items() if k.startswith("CUSTOM_PGPU_"))
            root = names[rp.root_provider_id]
            used[root] = used.get(root, 0) + n
    return used


def tagged_servers(admin) -> list:
    return [s for s in admin.compute.servers(details=True, all_projects=True) if LEASE_TAG in (s.metadata or {})]


@pytest.fixture
def clean_cloud(admin):
    """Before and after each test: no server of ours, no GPU allocated."""
    def settle():
        for server in tagged_servers(admin):
            admin.compute.delete_server(server, ignore_missing=True)
        wait_for("no tagged server and every GPU free in Placement",
                 lambda: not tagged_servers(admin) and not any(gpu_usage(admin).values()), timeout=120)
    settle()
    yield admin
    settle()


# seals the dashboard's Keystone tokens in the database (a Keystone login needs one); fixed,
# since pytest may import this module twice (as conftest, and from the tests that import it)
DASHBOARD_TOKEN_KEY = base64.urlsafe_b64encode(b"gpu-tenancy integration test key").decode()


@pytest.fixture
def keystone_config(db_url):
    return Config.load(database_url=db_url, auth_strategy="keystone", run_engine=True,
                       dashboard_token_keys=[DASHBOARD_TOKEN_KEY],
                       keystone_authtoken={"www_authenticate_uri": KEYSTONE, "auth_url": KEYSTONE,
                                           "auth_type": "password", "username": "gpu-tenancy",
                                           "password": "gpu-tenancy", "project_name": "service",
                                           "user_domain_name": "Default", "project_domain_name": "Default"})


@pytest.fixture
def os_app(keystone_config, os_cloud, clean_cloud, image_id):
    """The service on the loopback cloud with keystone auth, shapes and the image in
    its catalog; the engine is driven by the test (tick). The clock is virtual,
    starting at the real time, so a test can jump to a lease's end."""
    clock = VirtualClock(int(time.time()))
    app = create_app(keystone_config, clock=clock, cloud=os_cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    from gpu_tenancy.db import models as m
    from gpu_tenancy.db.session import utcnow_naive
    with session_scope(runtime.sessions) as session:
        for name, model, gpus, alias in SHAPES:
            session.add(m.Shape(name=name, gpu_model=model, gpus=gpus, vcpus=gpus, ram_mb=512 * gpus,
                                disk_gb=1, pci_alias=alias, created_at=utcnow_naive(clock.now())))
        session.add(m.Image(name="ubuntu-22.04", cloud_ref=image_id, created_at=utcnow_naive(clock.now())))
    runtime.engine.lifecycle.refresh_hosts()
    yield app
    runtime.sessions.kw["bind"].dispose()


@pytest.fixture(scope="session")
def tokens():
    """Project-scoped Keystone tokens of the personas, by clouds.yaml name."""
    out = {}
    for name in ("gt-admin", "gt-alice", "gt-bob", "gt-rita"):
        out[name] = connect(name, CLOUDS).session.get_token()
    return out


def auth(token: str) -> dict:
    return {"X-Auth-Token": token}


def unsealed(sealed: str) -> str:
    """A dashboard token as the service stores it (sealed with DASHBOARD_TOKEN_KEY), opened."""
    return Fernet(DASHBOARD_TOKEN_KEY).decrypt(sealed.encode()).decode()


def token_is_valid(token: str) -> bool:
    """Ask Keystone for a token from this one (keystoneauth): a revoked token gets 401 or 404."""
    try:
        v3.Token(auth_url=KEYSTONE, token=token, project_name="tenant-a",
                 project_domain_name="Default").get_access(ks_session.Session())
    except (ks_exc.Unauthorized, ks_exc.NotFound):
        return False
    return True

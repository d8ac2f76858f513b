"""Kill the engine at each step of starting and ending a lease, restart it, and
every lease ends consistent: no orphan server, volume, GPU allocation or flavor
in the cloud, no lease lost, the data volume kept.

In-process (each step, fast): the crash point raises an exception no handler
catches, the transaction in flight is rolled back, and a fresh engine takes over
the same database and cloud. Across processes (each step): `gpu-tenancy engine`
is killed with SIGKILL at the step (GPU_TENANCY_CRASH_AT) and a new one started;
the simulated cloud keeps its state in a file so that it outlives the engine."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from gpu_tenancy.app import create_app
from gpu_tenancy.clock import SystemClock
from gpu_tenancy.cloud.simulated import SimulatedCloud
from gpu_tenancy.config import DEMO_CLOUD, Config
from gpu_tenancy.db.session import session_scope
from gpu_tenancy.demo.seed import seed

from gpu_tenancy.db import models as m
from gpu_tenancy.engine import crashpoints, lease_flavor, lifecycle as lifecycle_module
from gpu_tenancy.engine.lifecycle import Lifecycle
from gpu_tenancy.engine.runner import EngineRunner
from tests.conftest import headers
from tests.consistency import assert_consistent
from tests.crash_harness import crash_then_restart, write_config

pytestmark = pytest.mark.long   # minutes: run first (tests/conftest.py)


class Killed(BaseException):
    """Not an Exception: nothing in the engine catches it, as nothing survives kill -9."""


SERVICE = {"volume": {"size_gb": 10}}
TENANT = {"boot": "tenant"}
CASES = [(step, SERVICE) for step in crashpoints.STEPS] + [(step, TENANT) for step in crashpoints.TENANT_STEPS]
CASE_IDS = [step for step in crashpoints.STEPS] + [f"tenant-{step}" for step in crashpoints.TENANT_STEPS]


def assert_nothing_of_the_lease_left(cloud):
    """No server, GPU, class, inventory or lease flavor left; the data volume kept."""
    assert cloud.servers() == {} and cloud.allocations() == {}
    assert cloud.leases_in_cloud() == set() and cloud.lease_inventory() == {} and cloud.lease_classes() == set()
    assert cloud.flavors() == {}
    assert [v["status"] for v in cloud.volumes().values()] == (["available"] if cloud.volumes() else [])


@pytest.mark.parametrize("step, body", CASES, ids=CASE_IDS)
def test_a_crash_at_each_step_ends_consistent_in_process(client, runtime, cloud, monkeypatch, step, body):
    lease = client.post("/v1/leases", json={"shape": "a100.x4", "instances": 2, "duration": 120, **body},
                        headers=headers()).get_json()["lease"]
    crashed = []

    def crash_point(name):
        if name == step and not crashed:
            crashed.append(name)
            raise Killed(name)
    monkeypatch.setattr(lifecycle_module, "crash_point", crash_point)
    monkeypatch.setattr(lease_flavor, "crash_point", crash_point)
    tenant_servers = []
    engine = runtime.engine
    for _ in range(12):
        try:
            engine.run_once()
        except Killed:
            # a new engine process: nothing carried over but the database and the cloud
            engine = EngineRunner(Lifecycle(runtime.sessions, cloud, runtime.clock, runtime.config))
        if body is TENANT and not tenant_servers and lease_state(runtime, lease["id"]) == "active":
            flavor = client.get(f"/v1/leases/{lease['id']}", headers=headers()).get_json()["lease"]["flavor"]
            tenant_servers = [cloud.tenant_boot("ml-vision", flavor["id"]) for _ in range(2)]
        runtime.clock.advance(20)
    assert crashed == [step]
    with runtime.sessions() as s:
        row = s.get(m.Lease, lease["id"])
        assert row.status == "ended", row.status
        assert row.failures == []
        reached_active = any(ev.to_state == "active" for ev in s.query(m.Event).filter_by(lease_id=row.id))
    assert reached_active
    if body is TENANT:
        assert len(tenant_servers) == 2
    assert_consistent(runtime.sessions, cloud, [lease["id"]])
    assert_nothing_of_the_lease_left(cloud)
    assert len(cloud.volumes()) == (1 if body is SERVICE else 0)   # kept, detached


def lease_state(runtime, lease_id):
    with runtime.sessions() as s:
        return s.get(m.Lease, lease_id).status


@pytest.mark.parametrize("step", crashpoints.STEPS)
def test_kill_9_at_each_step_then_restart_ends_consistent(tmp_path, db_url, step):
    cloud_config = yaml.safe_load(Path(DEMO_CLOUD).read_text())
    cloud_config.update(boot_seconds=1, delete_seconds=1, state_file=str(tmp_path / "cloud.json"))
    (tmp_path / "cloud.yaml").write_text(yaml.safe_dump(cloud_config))
    config_path = write_config(tmp_path, database_url=db_url, auth_strategy="noauth2", cloud_driver="simulated",
                               simulated_cloud=str(tmp_path / "cloud.yaml"))
    clock = SystemClock()
    cloud = SimulatedCloud.from_file(tmp_path / "cloud.yaml", clock)
    app = create_app(Config.load(str(config_path)), clock=clock, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, clock.now(), cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    reply = app.test_client().post("/v1/leases", json={"shape": "a100.x4", "instances": 2, "duration": "PT6S",
                                                       "volume": {"size_gb": 10}}, headers=headers())
    lease = reply.get_json()["lease"]
    try:
        outcome = crash_then_restart(tmp_path, config_path, runtime.sessions, lease["id"], step)
        assert outcome.killed, f"the engine was not killed at {step}: {outcome.engine_logs}"
        assert outcome.final_status == "ended" and outcome.reached_active, outcome.engine_logs
        time.sleep(cloud.delete_seconds)
        assert_consistent(runtime.sessions, cloud, [lease["id"]])
        assert_nothing_of_the_lease_left(cloud)
        assert len(cloud.volumes()) == 1
    finally:
        runtime.sessions.kw["bind"].dispose()

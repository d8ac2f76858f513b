"""Boot overhead on the loopback cloud: a lease from POST to ACTIVE through the
service (API, planner, engine, openstack driver), against openstacksdk's own
create_server + wait_for_server on the same flavor and host: once with its
default 2 s poll, as a user's script would wait, and once polling every 0.1 s,
which is the boot itself with next to no waiting. Prints figures;
asserts nothing.

    GT_LOOPBACK_CLOUDS=.loopback/clouds.yaml python bench/boot_overhead.py [--rounds 5]

The service runs in this process: SQLite, noauth2 (a token check is not a boot
cost), the real EngineRunner with its APScheduler timer and the openstack
driver. Rounds alternate service / direct so drift on the shared machine hits
both alike. Each VM is deleted and its GPUs released before the next round.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))

from gpu_tenancy.app import create_app  # noqa: E402
from gpu_tenancy.cloud.driver import ShapeSpec  # noqa: E402
from gpu_tenancy.cloud.openstack import OpenStackCloud  # noqa: E402
from gpu_tenancy.cloud.openstack.connection import connect  # noqa: E402
from gpu_tenancy.config import Config  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from gpu_tenancy.db import models as m  # noqa: E402
from gpu_tenancy.db.session import session_scope, utcnow_naive  # noqa: E402

SHAPE = ShapeSpec("bench.a100x1", "A100", 1, 1, 512, 1, "a100")
PERSONA = {"X-Project-Id": "", "X-User-Id": "bench", "X-Roles": "member"}


def released(admin, server_id: str) -> bool:
    try:
        return not admin.placement.get_allocation(server_id).allocations
    except Exception:
        return True


def wait(what, check, timeout=180, every=0.2):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        time.sleep(every)


def service_round(client, runtime, admin, headers) -> tuple[float, str]:
    t0 = time.perf_counter()
    lease = client.post("/v1/leases", json={"shape": SHAPE.name, "duration": "PT1H"}, headers=headers).get_json()
    if "lease" not in lease:
        raise SystemExit(f"the service refused the lease: {lease}")
    lease_id = lease["lease"]["id"]

    def active():
        return client.get(f"/v1/leases/{lease_id}", headers=headers).get_json()["lease"]["status"] == "active"
    wait("lease active", active, every=0.05)
    elapsed = time.perf_counter() - t0
    shown = client.get(f"/v1/leases/{lease_id}", headers=headers).get_json()["lease"]
    server_id, host = shown["servers"][0]["id"], shown["servers"][0]["host"]
    client.delete(f"/v1/leases/{lease_id}", headers=headers)
    wait("lease ended", lambda: client.get(f"/v1/leases/{lease_id}", headers=headers)
         .get_json()["lease"]["status"] == "ended")
    wait("GPUs released", lambda: released(admin, server_id))
    return elapsed, host


def direct_round(project_conn, admin, flavor_id, image_id, host, interval: float = 2) -> float:
    t0 = time.perf_counter()
    server = project_conn.compute.create_server(name="bench-direct", flavor_id=flavor_id, image_id=image_id,
                                                networks="none", host=host)
    project_conn.compute.wait_for_server(server, interval=interval, wait=180)   # openstacksdk's own wait
    elapsed = time.perf_counter() - t0
    project_conn.compute.delete_server(server)
    wait("server gone and GPUs released", lambda: released(admin, server.id))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clouds", default=os.environ.get("GT_LOOPBACK_CLOUDS"))
    args = parser.parse_args()
    if not args.clouds:
        raise SystemExit("set GT_LOOPBACK_CLOUDS (or --clouds) to the loopback cloud's clouds.yaml")

    admin = connect("gt-admin", args.clouds)
    # Keystone v3 (the loopback cloud's); openstacksdk types the proxy as v2's or v3's, and v2's has no projects
    project = admin.identity.find_project("tenant-a", ignore_missing=False).id  # type: ignore[union-attr]
    image_id = admin.image.find_image("ubuntu-22.04", ignore_missing=False).id
    cloud = OpenStackCloud(connect("gt-service", args.clouds), resource_classes={}, network="none")
    # the direct boots use a lease flavor of the bench's own: one unit on every GPU host, granted to
    # the project (a boot with no lease flavor has no way to the GPUs)
    bench_lease = f"bench-{uuid.uuid4()}"
    cloud.ensure_lease_class(bench_lease)
    cloud.set_lease_inventory(bench_lease, {h.name: 1 for h in cloud.capacity()})
    flavor_id = cloud.ensure_lease_flavor(bench_lease, project, SHAPE).id
    cloud.grant_lease_flavor(bench_lease, project)
    project_conn = cloud.conns.project(project)

    db = os.path.join(tempfile.mkdtemp(prefix="gt-bench-"), "bench.db")
    migrate.upgrade(f"sqlite:///{db}")
    config = Config.load(database_url=f"sqlite:///{db}", auth_strategy="noauth2", run_engine=True)
    app = create_app(config, cloud=cloud, start_engine=False)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        now = utcnow_naive(runtime.clock.now())
        session.add(m.Shape(name=SHAPE.name, gpu_model="A100", gpus=1, vcpus=1, ram_mb=512, disk_gb=1,
                            pci_alias="a100", created_at=now))
        session.add(m.Image(name="ubuntu-22.04", cloud_ref=image_id, created_at=now))
        session.add(m.Quota(project_id=project, gpu_model="A100", gpus=8, updated_at=now))
    runtime.engine.lifecycle.refresh_hosts()
    runtime.engine.start()
    client = app.test_client()
    headers = {**PERSONA, "X-Project-Id": project}

    service, direct, tight = [], [], []
    try:
        for i in range(args.rounds):
            took, host = service_round(client, runtime, admin, headers)
            service.append(took)
            direct.append(direct_round(project_conn, admin, flavor_id, image_id, host))
            tight.append(direct_round(project_conn, admin, flavor_id, image_id, host, interval=0.1))
            print(f"round {i + 1}: service {service[-1]:.2f} s, direct {direct[-1]:.2f} s, "
                  f"direct polling every 0.1 s {tight[-1]:.2f} s, on {host}", flush=True)
    finally:
        runtime.engine.stop()
        cloud.revoke_lease_flavor(bench_lease, project)
        cloud.remove_lease_inventory(bench_lease)
        cloud.remove_lease_flavor(bench_lease)
        cloud.remove_lease_class(bench_lease)
    s, d, t = statistics.median(service), statistics.median(direct), statistics.median(tight)
    print(f"\nmedian of {args.rounds}: service {s:.2f} s | openstacksdk direct, default 2 s poll {d:.2f} s "
          f"(ratio {s / d:.2f}, overhead {100 * (s / d - 1):+.0f} %) | direct, 0.1 s poll {t:.2f} s "
          f"(ratio {s / t:.2f}, overhead {100 * (s / t - 1):+.0f} %)")
    print(f"engine: tick {config.engine_tick_seconds} s, provisioning poll {config.provisioning_poll_seconds} s; "
          "openstacksdk wait_for_server polls every 2 s")


if __name__ == "__main__":
    main()

"""heat_templates/gpu-training-env.yaml launched by the loopback cloud's Heat
(heat-api and heat-engine, openstack-heat 27), as a tenant would: alice, a
plain member of tenant-a, with her own key pair, on tenant-a-net.

* With a plain flavor of the test's own, no lease: the stack reaches
  CREATE_COMPLETE, its server is ACTIVE with the data volume attached, and
  deleting the stack deletes both.
* Inside a ``"boot": "tenant"`` lease, with the lease's own flavor: the server
  is on the lease's host with its volume attached; a second stack, one VM more
  than the lease has, fails with "No valid host"."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from gpu_tenancy.cloud.openstack.connection import connect

from tests.integration.conftest import CLOUDS, auth, gpu_usage, wait_for
from tests.integration.test_leases_on_openstack import api, tick_until  # noqa: F401  (api: a fixture)

template_utils = pytest.importorskip("heatclient.common.template_utils")

TEMPLATE = Path(__file__).parents[2] / "heat_templates" / "gpu-training-env.yaml"
STACK_TIMEOUT = 240
SSH_FROM = "192.0.2.0/24"   # the template has no default: SSH is never open to the world unasked


@pytest.fixture(scope="module")
def alice():
    conn = connect("gt-alice", CLOUDS)
    try:
        conn.orchestration.get("/build_info").raise_for_status()
    except Exception as e:  # noqa: BLE001  (no catalog entry, nothing on :8004, ...)
        pytest.fail(f"the loopback cloud has no working Heat ({e}); scripts/loopback/start.sh starts it",
                    pytrace=False)
    return conn


@pytest.fixture
def key_name(alice):
    public = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    keypair = alice.compute.create_keypair(name=f"gt-heat-{uuid.uuid4().hex[:8]}", public_key=public)
    yield keypair.name
    alice.compute.delete_keypair(keypair, ignore_missing=True)


@pytest.fixture
def stacks(alice):
    """Creates stacks from the template as alice; deletes what is left at the end."""
    files, template = template_utils.get_template_contents(template_file=str(TEMPLATE))
    files = {url: body.decode() if isinstance(body, bytes) else body for url, body in files.items()}
    made = []

    def create(wait=True, **parameters):
        """the stack once CREATE_COMPLETE (wait=False: as soon as Heat took it)"""
        stack = alice.orchestration.create_stack(
            name=f"gt-heat-{uuid.uuid4().hex[:8]}", template=template, files=files,
            parameters=parameters, timeout_mins=STACK_TIMEOUT // 60)
        made.append(stack)
        if not wait:
            return stack
        return alice.orchestration.wait_for_status(
            stack, "CREATE_COMPLETE", failures=["CREATE_FAILED"], interval=1, wait=STACK_TIMEOUT)

    yield create
    for stack in made:
        delete(alice, stack)


def delete(conn, stack):
    # Heat still shows a deleted stack by id for a while; deleting it again makes the
    # engine log errors (its credentials are gone), so only what is not deleted yet
    current = conn.orchestration.find_stack(stack.id, ignore_missing=True)
    if current is None or current.status == "DELETE_COMPLETE":
        return
    conn.orchestration.delete_stack(stack, ignore_missing=True)
    conn.orchestration.wait_for_delete(stack, interval=1, wait=STACK_TIMEOUT)


def settle(conn, stack):
    """The stack once it is done creating, either way."""
    return wait_for(f"stack {stack.name} to finish creating",
                    lambda: (s := conn.orchestration.get_stack(stack.id)).status != "CREATE_IN_PROGRESS" and s,
                    timeout=STACK_TIMEOUT, every=1)


def outputs(stack) -> dict:
    return {o["output_key"]: o.get("output_value") for o in stack.outputs or []}


def isolation_specs(admin) -> dict[str, str]:
    """The traits the hosts' aggregates require (isolated aggregate filtering), as flavor
    extra specs: a flavor without them has no host in a cloud whose every host is a GPU
    host kept for lease flavors."""
    return {key: "required" for aggregate in admin.compute.aggregates()
            for key, value in (aggregate.metadata or {}).items()
            if key.startswith("trait:") and value == "required"}


@pytest.fixture
def plain_flavor(admin, projects):
    """A private non-GPU flavor that tenant-a may use, allowed onto the (GPU) hosts."""
    flavor = admin.compute.create_flavor(name=f"gt-heat-plain-{uuid.uuid4().hex[:8]}", ram=512, vcpus=1,
                                         disk=1, is_public=False)
    if specs := isolation_specs(admin):
        admin.compute.create_flavor_extra_specs(flavor, specs)
    admin.compute.flavor_add_tenant_access(flavor, projects["tenant-a"])
    yield flavor
    admin.compute.delete_flavor(flavor, ignore_missing=True)


def assert_server_with_its_volume(admin, stack, project_id):
    out = outputs(stack)
    server = admin.compute.get_server(out["server_id"])
    assert (server.status, server.project_id) == ("ACTIVE", project_id)
    volume = admin.block_storage.get_volume(out["data_volume_id"])
    assert volume.status == "in-use"
    assert [a["server_id"] for a in volume.attachments] == [server.id]
    assert [v["id"] for v in server.attached_volumes] == [volume.id]
    return server, volume


def assert_gone(admin, server, volume):
    wait_for("the stack's server and volume to be deleted with it",
             lambda: admin.compute.find_server(server.id, all_projects=True) is None
             and admin.block_storage.find_volume(volume.id, all_projects=True) is None, timeout=60)


def test_a_stack_from_the_template_with_a_plain_flavor(alice, admin, projects, plain_flavor, key_name,
                                                       stacks, image_id):
    stack = stacks(flavor=plain_flavor.id, network="tenant-a-net", image=image_id, key_name=key_name,
                   ssh_cidr=SSH_FROM, data_volume_size=1)
    assert stack.status == "CREATE_COMPLETE", stack.status_reason
    server, volume = assert_server_with_its_volume(admin, stack, projects["tenant-a"])
    assert server.flavor["original_name"] == plain_flavor.name
    assert "tenant-a-net" in server.addresses

    delete(alice, stack)
    assert_gone(admin, server, volume)


def lease_hosts(lease) -> set[str]:
    """The hosts the lease holds GPUs on (its allocations)."""
    return {a["host"] for a in lease["allocations"]}


def test_a_stack_inside_a_tenant_boot_lease_gets_the_leases_host_and_no_more(
        os_app, api, tokens, alice, admin, projects, key_name, stacks, image_id):  # noqa: F811
    token = tokens["gt-alice"]
    reply = api.post("/v1/leases", json={"shape": "a100.x1", "instances": 1, "boot": "tenant",
                                         "duration": "PT1H"}, headers=auth(token))
    if reply.status_code == 400 and "'boot' was unexpected" in str(reply.get_json()):
        pytest.skip("the service does not take \"boot\": \"tenant\" yet (issue 17's per-lease flavors)")
    assert reply.status_code == 201, reply.get_json()
    lease = reply.get_json()["lease"]
    try:
        active = tick_until(os_app, api, token, lease["id"], "active")
        if "flavor" not in active:
            pytest.skip("the lease shows no `flavor` yet (issue 17's per-lease flavors)")
        flavor, hosts = active["flavor"], lease_hosts(active)
        assert flavor["id"] and flavor["name"] and len(hosts) == 1, active

        first = stacks(flavor=flavor["id"], network="tenant-a-net", image=image_id, key_name=key_name,
                       ssh_cidr=SSH_FROM, data_volume_size=1)
        assert first.status == "CREATE_COMPLETE", first.status_reason
        server, volume = assert_server_with_its_volume(admin, first, projects["tenant-a"])
        assert {server.compute_host} == hosts
        assert gpu_usage(admin).get(server.compute_host) == 1

        second = settle(alice, stacks(flavor=flavor["name"], network="tenant-a-net", image=image_id,
                                      key_name=key_name, ssh_cidr=SSH_FROM, data_volume_size=1, wait=False))
        assert second.status == "CREATE_FAILED"
        assert "No valid host" in second.status_reason
        assert gpu_usage(admin).get(server.compute_host) == 1

        delete(alice, first)
        assert_gone(admin, server, volume)
    finally:
        api.delete(f"/v1/leases/{lease['id']}", headers=auth(token))
        tick_until(os_app, api, token, lease["id"], "ended")

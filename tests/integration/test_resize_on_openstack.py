"""A member's resize off its lease's flavor, on the loopback cloud's real Nova and Placement.

A member (alice, tenant-a) of a `"boot": "tenant"` lease boots a server with the lease's
flavor, then resizes it to a flavor without GPUs and does not confirm it (VERIFY_RESIZE).
Nova keeps the old flavor's claim (the lease's unit and GPU, on the migration's record in
Placement) until the resize is confirmed or reverted, so the lease could not end: its
inventory cannot be removed while in use. The engine confirms the resize at the lease's
end (engine/lease_flavor.py confirm_resized): the lease ends, nothing of it is left in
Placement, and the member's server stays, on its new flavor.

Every host of the loopback cloud is a GPU host in an isolated aggregate, and Nova resizes
to another host (allow_resize_to_same_host is off), so the plain flavor requires the
aggregates' trait: the resize is the cold migration a real cloud would do to a host
without GPUs."""
from __future__ import annotations

import uuid

import pytest

from gpu_tenancy.cloud.driver import lease_resource_class
from tests.integration.conftest import ISOLATION_SPECS, auth, gpu_usage, wait_for
from tests.integration.test_lease_enforcement_on_openstack import alice  # noqa: F401  (a fixture)
from tests.integration.test_leases_on_openstack import api, create, tick_until  # noqa: F401  (api: a fixture)


@pytest.fixture
def plain_flavor(admin, projects):
    """A private flavor without GPUs that tenant-a may use, allowed onto the (GPU) hosts."""
    flavor = admin.compute.create_flavor(name=f"itest-resize-plain-{uuid.uuid4().hex[:6]}", vcpus=1, ram=512,
                                         disk=1, is_public=False)
    admin.compute.create_flavor_extra_specs(flavor, ISOLATION_SPECS)
    admin.compute.flavor_add_tenant_access(flavor, projects["tenant-a"])
    yield flavor
    admin.compute.delete_flavor(flavor, ignore_missing=True)


def lease_usage(admin, lease_id: str) -> int:
    """Units of the lease's own resource class in use anywhere in Placement."""
    rc = lease_resource_class(lease_id)
    return sum((admin.placement.fetch_resource_provider_usages(rp).usages or {}).get(rc, 0)
               for rp in admin.placement.resource_providers())


def remove_leftovers(alice, os_cloud, projects, lease_id: str) -> None:
    """A failed run leaves nothing of the lease in the shared cloud: the member's servers, and the
    lease's flavor, inventory and class."""
    alice.delete_all()
    if lease_id in os_cloud.leases_in_cloud():
        os_cloud.revoke_lease_flavor(lease_id, projects["tenant-a"])
        wait_for("the lease's inventory to go", lambda: os_cloud.remove_lease_inventory(lease_id))
        os_cloud.remove_lease_flavor(lease_id)
        os_cloud.remove_lease_class(lease_id)


@pytest.mark.parametrize("seen", [True, False], ids=["seen-by-a-pass", "ended-before-a-pass"])
def test_a_members_unconfirmed_resize_off_the_lease_is_confirmed_at_its_end(
        os_app, api, tokens, alice, plain_flavor, admin, os_cloud, projects, seen):  # noqa: F811
    """`seen`: an engine pass sees the server leave the lease's flavor before the lease ends;
    otherwise the lease ends (its cancel) first, the server still recorded as the lease's."""
    token = tokens["gt-alice"]
    lease = create(api, token, shape="a100.x1", instances=1, boot="tenant")
    try:
        active = tick_until(os_app, api, token, lease["id"], "active")
        server, _ = alice.boot(active["flavor"]["id"])
        assert server is not None
        old_host = admin.compute.get_server(server).compute_host
        runtime = os_app.extensions["gpu_tenancy"]
        runtime.engine.run_once()                                       # records the member's server
        assert [s["id"] for s in api.get(f"/v1/leases/{lease['id']}", headers=auth(token))
                .get_json()["lease"]["servers"]] == [server]
        assert lease_usage(admin, lease["id"]) == 1

        alice.conn.compute.resize_server(server, plain_flavor.id)
        resized = wait_for("the resize to wait for its confirmation",
                           lambda: (s := admin.compute.get_server(server)).status == "VERIFY_RESIZE" and s,
                           timeout=120, detail=lambda: admin.compute.get_server(server).status)
        assert resized.flavor["original_name"] == plain_flavor.name and resized.compute_host != old_host
        assert os_cloud.lease_servers(lease["id"]) == []                # no longer on the lease's flavor...
        assert lease_usage(admin, lease["id"]) == 1                     # ...but its unit held by the migration
        assert gpu_usage(admin).get(old_host) == 1
        if seen:
            runtime.engine.run_once()                                   # sees it gone from the lease
            assert [s["status"] for s in api.get(f"/v1/leases/{lease['id']}", headers=auth(token))
                    .get_json()["lease"]["servers"]] == ["DELETED"]

        assert api.delete(f"/v1/leases/{lease['id']}", headers=auth(token)).status_code in (200, 202, 204)
        tick_until(os_app, api, token, lease["id"], "ended", timeout=90)
        assert lease["id"] not in os_cloud.leases_in_cloud()            # inventory, flavor and class gone
        assert not any(gpu_usage(admin).values())
        kept = wait_for("the confirmed resize to settle", lambda: (s := admin.compute.get_server(server))
                        .status == "ACTIVE" and s, timeout=60, detail=lambda: admin.compute.get_server(server).status)
        assert kept.flavor["original_name"] == plain_flavor.name and kept.compute_host == resized.compute_host
        events = api.get(f"/v1/leases/{lease['id']}/events", headers=auth(token)).get_json()["events"]
        assert sum("is confirmed at the lease's end" in (e.get("message") or "") for e in events) == 1
    finally:
        remove_leftovers(alice, os_cloud, projects, lease["id"])


def test_a_members_confirmed_resize_off_the_lease_is_kept_at_its_end(
        os_app, api, tokens, alice, plain_flavor, admin, os_cloud, projects):  # noqa: F811
    """The member resizes its server to a flavor without GPUs and confirms it itself, before any
    engine pass sees it: still recorded as the lease's at the end, it was deleted. Nova embeds the
    flavor without its id (>= 2.47): the driver tells it apart by its name and extra specs."""
    token = tokens["gt-alice"]
    lease = create(api, token, shape="a100.x1", instances=1, boot="tenant")
    try:
        active = tick_until(os_app, api, token, lease["id"], "active")
        server, _ = alice.boot(active["flavor"]["id"])
        assert server is not None
        runtime = os_app.extensions["gpu_tenancy"]
        runtime.engine.run_once()                                       # records the member's server
        assert [s["id"] for s in api.get(f"/v1/leases/{lease['id']}", headers=auth(token))
                .get_json()["lease"]["servers"]] == [server]
        on_lease = os_cloud.server_state(server).flavor
        assert on_lease is not None and on_lease.lease_id == lease["id"] and on_lease.gpus is True

        alice.conn.compute.resize_server(server, plain_flavor.id)
        wait_for("the resize to wait for its confirmation",
                 lambda: admin.compute.get_server(server).status == "VERIFY_RESIZE",
                 timeout=120, detail=lambda: admin.compute.get_server(server).status)
        alice.conn.compute.confirm_server_resize(server)               # the member's own --confirm
        wait_for("the confirmed resize to settle", lambda: admin.compute.get_server(server).status == "ACTIVE",
                 timeout=60, detail=lambda: admin.compute.get_server(server).status)
        wait_for("the lease's unit to be given back", lambda: lease_usage(admin, lease["id"]) == 0, timeout=60)
        plain = os_cloud.server_state(server).flavor
        assert plain is not None and (plain.name, plain.lease_id, plain.gpus) == (plain_flavor.name, None, False)

        assert api.delete(f"/v1/leases/{lease['id']}", headers=auth(token)).status_code in (200, 202, 204)
        tick_until(os_app, api, token, lease["id"], "ended", timeout=90)
        assert lease["id"] not in os_cloud.leases_in_cloud()
        assert not any(gpu_usage(admin).values())
        kept = admin.compute.get_server(server)
        assert kept.status == "ACTIVE" and kept.flavor["original_name"] == plain_flavor.name
        events = api.get(f"/v1/leases/{lease['id']}/events", headers=auth(token)).get_json()["events"]
        assert sum("released from the lease" in (e.get("message") or "") for e in events) == 1
    finally:
        remove_leftovers(alice, os_cloud, projects, lease["id"])

"""After a crash and a restart: every lease in a consistent state, nothing of ours
in the cloud that no lease owns, and no tenant volume lost."""
from __future__ import annotations

from collections import Counter

from sqlalchemy import select

from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import FINAL, HOLDING

LIVE_SERVERS = {"provisioning", "active", "ending"}


def assert_consistent(sessions, cloud, lease_ids, volumes=()):
    """`volumes`: ids of tenant volumes that must still exist."""
    with sessions() as s:
        leases = {row.id: row for row in s.scalars(select(m.Lease))}
        servers = {(sv.lease_id, sv.cloud_id) for sv in s.scalars(select(m.Server)) if sv.cloud_id}
        allocations = list(s.scalars(select(m.Allocation)))
    assert set(lease_ids) <= set(leases), "a lease was lost"
    final = {st.value for st in FINAL}
    for row in leases.values():
        assert row.status in {st.value for st in HOLDING} | final | {"queued", "requested"}
    objects = cloud.list_tagged()
    for obj in (o for o in objects if o.kind == "server"):
        owner = leases.get(obj.lease_id)
        assert owner is not None and owner.status in LIVE_SERVERS, f"orphan server {obj.id} ({obj.lease_id})"
        assert (obj.lease_id, obj.id) in servers, f"server {obj.id} unknown to its lease"
    for lease_id, cloud_id in servers:
        if leases[lease_id].status in final:
            assert cloud.server_state(cloud_id).status == "DELETED", f"server {cloud_id} of a finished lease"
            assert cloud.gpus_released(cloud_id), f"GPUs of server {cloud_id} still allocated"
    tagged = Counter(o.lease_id for o in objects if o.kind == "volume")
    assert all(n == 1 for n in tagged.values()), f"a lease has two volumes: {tagged}"
    for row in leases.values():
        if row.volume_id:
            assert cloud.volume_status(row.volume_id) != "missing", f"volume {row.volume_id} lost"
    for volume_id in volumes:
        assert cloud.volume_status(volume_id) != "missing", f"volume {volume_id} lost"
    flavors = Counter((o.project_id, o.attrs.get("shape") or o.attrs.get("name")) for o in objects
                      if o.kind == "flavor")
    assert all(n == 1 for n in flavors.values()), f"duplicate flavors: {flavors}"
    for alloc in allocations:
        assert leases[alloc.lease_id].status not in {"queued", "requested", "cancelled", "expired"}, \
            f"allocation {alloc.id} of a lease that holds nothing"

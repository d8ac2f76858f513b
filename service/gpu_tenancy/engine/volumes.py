"""A project's data volumes as the cloud has them, beside the leases that use
them: what a tenant picks from for a new lease ("volume": {"id": ...})."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.cloud.driver import CloudDriver, CloudError, VolumeInfo
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import FINAL
from gpu_tenancy.errors import ServiceUnavailable


@dataclass(frozen=True)
class ProjectVolume:
    volume: VolumeInfo
    lease_id: str | None          # the unfinished lease it is the data volume of
    free_for_a_lease: bool        # available, and no unfinished lease names it


def listing(session: Session, cloud: CloudDriver, project_id: str) -> list[ProjectVolume]:
    try:
        found = cloud.project_volumes(project_id)
    except CloudError as exc:
        raise ServiceUnavailable(f"the cloud did not list the volumes: {exc.message}"
                               + (f" (cloud said: {exc.cloud_message})" if exc.cloud_message else "")) from None
    using = dict(session.execute(select(m.Lease.volume_id, m.Lease.id).where(
        m.Lease.project_id == project_id, m.Lease.volume_id.is_not(None),
        m.Lease.status.not_in([s.value for s in FINAL]))).all())
    return [ProjectVolume(v, using.get(v.id), v.status == "available" and v.id not in using)
            for v in sorted(found, key=lambda v: (v.name, v.id))]

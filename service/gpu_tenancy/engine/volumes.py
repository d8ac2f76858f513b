"""A project's data volumes as the cloud has them, beside the leases that use
them: what a tenant picks from for a new lease ("volume": {"id": ...})."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpu_tenancy.cloud.driver import CloudDriver, CloudError, VolumeInfo
from gpu_tenancy.db import models as m
from gpu_tenancy.domain.states import FINAL
from gpu_tenancy.domain.failures import FailureClass, cloud_said
from gpu_tenancy.errors import BadRequest, ServiceUnavailable


@dataclass(frozen=True)
class ProjectVolume:
    volume: VolumeInfo
    lease_id: str | None          # the unfinished lease it is the data volume of
    free_for_a_lease: bool        # available, and no unfinished lease names it


def listing(session: Session, cloud: CloudDriver, project_id: str, operator: bool = True) -> list[ProjectVolume]:
    """`operator`: a refusal tells the cloud's own words too (read with the service's admin rights)."""
    try:
        found = cloud.project_volumes(project_id)
    except CloudError as exc:
        raise ServiceUnavailable(f"the cloud did not list the volumes: {exc.message}"
                                 + cloud_said(exc.cloud_message if operator else None)) from None
    using = dict(session.execute(select(m.Lease.volume_id, m.Lease.id).where(
        m.Lease.project_id == project_id, m.Lease.volume_id.is_not(None),
        m.Lease.status.not_in([s.value for s in FINAL]))).all())
    return [ProjectVolume(v, using.get(v.id), v.status == "available" and v.id not in using)
            for v in sorted(found, key=lambda v: (v.name, v.id))]


def check_owned(cloud: CloudDriver, project_id: str, volume_id: str, operator: bool) -> None:
    """Refuse a lease's volume that the cloud does not say is the project's, when it is
    asked for (the boot checks again). The cloud's own words go to operators only: it is
    read with the service's admin rights."""
    try:
        cloud.check_volume_owner(project_id, volume_id)
    except CloudError as exc:
        said = cloud_said(exc.cloud_message if operator else None)
        if exc.failure_class is FailureClass.VOLUME:
            raise BadRequest(f"volume {volume_id} is not one of project {project_id}'s volumes; "
                             f"GET /v1/volumes lists them{said}", "gpu_tenancy.unknown_volume") from None
        raise ServiceUnavailable(f"the cloud did not say whose volume {volume_id} is "
                                 f"({exc.failure_class.value}); try again{said}") from None

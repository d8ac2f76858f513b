"""The demo's catalog: shapes, standard images and two projects with quotas.
Idempotent: running it twice changes nothing."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import ensure_lock_rows, utcnow_naive
from gpu_tenancy.engine.priority_classes import seed_defaults

# name: (gpu model, GPUs, vCPUs, RAM MiB, root disk GiB, PCI alias)
SHAPES = {
    "a100.x1": ("A100", 1, 12, 120 * 1024, 100, "a100"),
    "a100.x2": ("A100", 2, 24, 240 * 1024, 100, "a100"),
    "a100.x4": ("A100", 4, 48, 480 * 1024, 200, "a100"),
    "a100.x8": ("A100", 8, 96, 960 * 1024, 400, "a100"),
    "h100.x1": ("H100", 1, 24, 240 * 1024, 100, "h100"),
    "h100.x2": ("H100", 2, 48, 480 * 1024, 200, "h100"),
    "h100.x4": ("H100", 4, 96, 960 * 1024, 400, "h100"),
}

# GB per GPU, the demo's gpu_memory_gb setting: an A100 lease that waits is offered H100s (counter-offers)
GPU_MEMORY_GB = {"A100": 80, "H100": 80}

# project: {gpu model: (nominal GPUs, borrowable, max duration s, weight)}
PROJECTS = {
    "ml-vision": {"A100": (16, 8, 7 * 86400, 1.0), "H100": (4, 0, 2 * 86400, 1.0)},
    "nlp-lab": {"A100": (16, 0, 3 * 86400, 1.0), "H100": (4, 4, 2 * 86400, 1.0)},
}


def seed(session: Session, now: int, images: list[dict]) -> None:
    """`images` are the cloud's standard images: dicts with id, name and optional description."""
    stamp = utcnow_naive(now)
    ensure_lock_rows(session)
    for name, (model, gpus, vcpus, ram, disk, alias) in SHAPES.items():
        if session.get(m.Shape, name) is None:
            session.add(m.Shape(name=name, gpu_model=model, gpus=gpus, vcpus=vcpus, ram_mb=ram, disk_gb=disk,
                                pci_alias=alias, created_at=stamp))
    for order, image in enumerate(images):
        if session.get(m.Image, image["name"]) is None:
            # the catalog keeps the cloud's order: its first image is the default
            session.add(m.Image(name=image["name"], cloud_ref=image["id"],
                                description=image.get("description", ""),
                                created_at=stamp + timedelta(seconds=order)))
    seed_defaults(session, now)
    for project, limits in PROJECTS.items():
        for model, (gpus, borrow, max_duration, weight) in limits.items():
            if session.get(m.Quota, (project, model)) is None:
                session.add(m.Quota(project_id=project, gpu_model=model, gpus=gpus, borrow_gpus=borrow,
                                    max_duration=max_duration, weight=weight, updated_at=stamp))

"""Trace readers: Philly (Pollux's job list) and Alibaba openb, as jobs.

A job is what a tenant asks the cluster for: `gpus` GPUs for `runtime`
seconds from `arrival` (epoch seconds). More than 8 GPUs become a gang of
8-GPU VMs (the GPU count is rounded up to a multiple of 8; Philly has 7 jobs
of 12 and 7 of 24 GPUs, the rest of its >8 jobs are multiples of 8).
"""
from __future__ import annotations

import csv
import math
import os
from datetime import datetime, timezone

from gpu_tenancy.whatif.history import Lease

HOST_GPUS = 8


# A job is the what-if's lease (its fields first: the rest default to one GPU model,
# no priority, a start on arrival), so the bench and the what-if replay one kind of thing.
Job = Lease


def shape(gpus: int, host_gpus: int = HOST_GPUS) -> tuple[int, int]:
    """(GPUs per VM, VMs): up to a host's worth in one VM, else a gang of whole hosts."""
    gpus = max(1, gpus)
    if gpus <= host_gpus:
        return gpus, 1
    return host_gpus, math.ceil(gpus / host_gpus)


def epoch(stamp: str) -> int:
    """'2017-10-09 07:01:55' (UTC) in seconds; with fromisoformat this is about 5x faster than with strptime."""
    return int(datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp())


def read_philly(path: str, start: str | None = None, end: str | None = None) -> list[Job]:
    """Philly jobs submitted in [start, end) (dates like 2017-11-01); tenant = VC."""
    lo = epoch(start + " 00:00:00") if start else None
    hi = epoch(end + " 00:00:00") if end else None
    jobs = []
    with open(path, newline="") as f:
        for i, r in enumerate(csv.DictReader(f)):
            t = epoch(r["timestamp"])
            if (lo is not None and t < lo) or (hi is not None and t >= hi):
                continue
            g, n = shape(int(r["num_gpus"]))
            jobs.append(Job(f"p{i:06d}", r["cluster"], t, max(1, round(float(r["duration"]))), g, n))
    jobs.sort(key=lambda j: (j.arrival, j.jid))
    return jobs


OPENB_T0 = epoch("2023-01-01 00:00:00")   # openb times are relative seconds; any origin will do


def read_openb(path: str, max_runtime: int | None = None) -> list[Job]:
    """openb tasks asking for >= 1 GPU that were scheduled (861 Pending pods never ran:
    dropped); a fraction of a GPU counts as 1 (passthrough has no fractions);
    run time = deletion_time - scheduled_time; tenant = qos (the only field
    that groups pods by owner class: LS, BE, Burstable, Guaranteed). With
    max_runtime, longer pods are left out: openb is a snapshot of pods, and
    81 of them that live over a day (services, up to 145 days) hold 90 % of
    its GPU-time; they are no queue's business."""
    jobs = []
    with open(path, newline="") as f:
        for i, r in enumerate(csv.DictReader(f)):
            if int(r["num_gpu"]) < 1 or not r["scheduled_time"]:
                continue
            run = int(r["deletion_time"]) - int(r["scheduled_time"])
            if max_runtime is not None and run > max_runtime:
                continue
            g, n = shape(int(r["num_gpu"]))
            jobs.append(Job(f"o{i:05d}", r["qos"], OPENB_T0 + int(r["creation_time"]), max(1, run), g, n))
    jobs.sort(key=lambda j: (j.arrival, j.jid))
    return jobs


def read_vc_nodes(path: str) -> dict[str, int]:
    with open(path, newline="") as f:
        return {r["vc"]: int(r["node num"]) for r in csv.DictReader(f)}


TRACES_ENV = "GT_TRACES_DIR"


def default_trace_dir() -> str | None:
    """Where the trace CSVs are: $GT_TRACES_DIR (they are not part of the repo)."""
    return os.environ.get(TRACES_ENV)

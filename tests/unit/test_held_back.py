"""bench/held_back.py: free GPUs a waiting lease fits on, integrated between decisions."""
from __future__ import annotations

import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from baselines import EASY, FIFO  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from held_back import HeldBack, waiting_jobs  # noqa: E402
from traces import Job, shape  # noqa: E402


def job(i, arrival, runtime, gpus):
    g, n = shape(gpus)
    return Job(f"j{i}", "a", arrival, runtime, g, n)


# one host of 8 GPUs: A holds 6 until 100; B (4 GPUs) waits for it; C (2 GPUs, 50 s) fits in the 2 free
TRACE = [job(0, 0, 100, 6), job(1, 1, 100, 4), job(2, 2, 50, 2)]


def held(sched) -> HeldBack:
    probe = HeldBack(sched, waiting_jobs)
    simulate(TRACE, 1, sched)
    return probe


def test_a_lease_kept_off_gpus_it_fits_counts_as_held_back():
    fifo = held(FIFO())   # C waits behind B from 2 to 100 on the 2 free GPUs it fits
    assert (fifo.held_gpu_s, fifo.could_gpu_s, fifo.held_s) == (2 * 98, 2 * 98, 98)


def test_free_gpus_no_waiting_lease_fits_are_not_held_back():
    easy = held(EASY())   # C starts at once; from 52 the 2 free GPUs fit only C, gone, not B's 4
    assert (easy.held_gpu_s, easy.could_gpu_s, easy.held_s) == (0, 0, 0)

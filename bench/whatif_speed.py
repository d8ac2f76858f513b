"""Policy what-if speed: a 30-day history of 5,000 leases (the demo's mix of shapes and run times,
four projects) on a cloud sized for it, replayed under the current and a proposed setting, as
`gpu-tenancy whatif` and POST /v1/whatif do. The issue's bound: under 60 s.

    python bench/whatif_speed.py [--leases 5000] [--days 30]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service"))

from gpu_tenancy.demo.history import requests  # noqa: E402
from gpu_tenancy.domain.model import Host, QuotaLimit  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings  # noqa: E402
from gpu_tenancy.whatif import changes  # noqa: E402
from gpu_tenancy.whatif.compare import what_if  # noqa: E402
from gpu_tenancy.whatif.history import History  # noqa: E402
from gpu_tenancy.whatif.report import text  # noqa: E402

PROJECTS = ["astro", "bio", "ml-vision", "nlp-lab"]
T0 = 1_796_112_000
BOUND = 60.0


def history(n_leases: int, days: float, seed: int) -> History:
    """About n_leases leases over the days on a cloud busy about 80 % of the time (an A100 host of 8
    GPUs per 12 leases a day, an H100 host of 4 per 33), each project a quarter of it as quota and
    as much again to borrow."""
    per_day = n_leases / days
    a100, h100 = max(1, round(per_day / 12)), max(1, round(per_day / 33))
    hosts = tuple([Host(f"a{i:03d}", "A100", 8) for i in range(a100)] +
                  [Host(f"h{i:03d}", "H100", 4) for i in range(h100)])
    quotas = {}
    for p in PROJECTS:
        quotas[(p, "A100")] = QuotaLimit(p, "A100", 2 * a100, 2 * a100)
        quotas[(p, "H100")] = QuotaLimit(p, "H100", h100, h100)
    start = T0 - round(days * 86400)
    leases = requests(PROJECTS, start, days, per_day, random.Random(seed))
    return History(start, T0, hosts, quotas, tuple(leases))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leases", type=int, default=5000)
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", dest="changes", action="append", default=None, metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    h = history(a.leases, a.days, a.seed)
    t, c = time.perf_counter(), time.process_time()
    r = what_if(h, PlannerSettings(), changes.parse(a.changes or ["weight.ml-vision=2"]))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(text(r))
    print(f"\n{len(h.leases)} leases over {a.days:g} days on {h.capacity} GPUs: both replays in {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU ({'under' if wall < BOUND else 'OVER'} the {BOUND:.0f} s bound)")
    return 0 if wall < BOUND else 1


if __name__ == "__main__":
    sys.exit(main())

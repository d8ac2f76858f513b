"""The lease-edge property test (tests/property/test_edges_property.py) for a long run:
its driver, the real service on a fresh SQLite database per seed, for as many steps
as asked; prints steps per second, the invariant checks made and every broken
promise, with the steps that led to the first of each.

    python bench/edges_property.py --seeds 1 2 3 --steps 50000

A seed and a step count replay a run exactly (lease and server ids come from the seed).
Exits 1 if a promise was broken."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "service")]

from gpu_tenancy.db import migrate  # noqa: E402
from tests.property.edges_driver import INVARIANTS, make_app, run  # noqa: E402

T0 = 1_796_112_000   # 2026-12-01T08:00:00Z, as the tests start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--steps", type=int, default=50_000, help="steps per seed")
    ap.add_argument("--context", type=int, default=25, help="steps shown before a first violation")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)   # every injected fault logs a warning
    broken = 0
    for seed in a.seeds:
        with tempfile.TemporaryDirectory() as workdir:
            url = f"sqlite:///{os.path.join(workdir, 'edges.db')}"
            migrate.upgrade(url)
            app = make_app(url, T0)
            report = run(app, seed, a.steps)
            app.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()
        print(f"seed {seed}: {report.steps} steps in {report.seconds:.1f} s ({report.steps / report.seconds:.1f} "
              f"steps/s); ETAs held to the real starts over {report.quiet_steps} quiet steps; "
              f"{report.notices} early ends decided, {report.call_offs} called off, {report.refused} call-offs refused")
        for name in INVARIANTS:
            print(f"  {name:14} {report.checks[name]:9d} checks  {len(report.violations.get(name, [])):6d} broken")
        print(f"  what a release later than planned broke, tolerated: {len(report.tolerated)}")
        for step, text in report.tolerated[:a.context]:
            print(f"    step {step}: {text}")
        for name in INVARIANTS:
            if report.violations.get(name):
                broken += 1
                print(report.explain(name, a.context))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

"""One reclaim pass (domain/reclaim.early_ends, what the engine runs after each replan) on a cluster
whose every GPU a tenant borrows with one-GPU leases, while leases within their quota wait: CPU
seconds and trial plans per pass, side by side with a git ref's. Prints figures; asserts nothing.

    python bench/reclaim_pass.py                               # 20 and 100 hosts, 0 and 200 waiting ahead
    python bench/reclaim_pass.py --hosts 20,100 --waiting 0,200 --against HEAD~1
        # the same pass with the domain of a git ref, in a process of its own: CPU time ratios, and
        # whether both ended the same leases

Workload: hosts of 8 GPUs, each GPU held by a borrowed one-GPU lease (started 2 h ago and
earlier, one a minute, going round the hosts: the newest free no host before most are taken),
then `waiting` leases of 1 to 8 GPUs for 1 to 12 h asked before an 8-GPU lease, all of a
project within its quota: each waits for the borrowers' end, 10 h away, so the pass examines them.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from git_export import export_ref

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = 1_800_000_000
H = 3600


def child(service_dir: str, hosts: int, waiting: int) -> None:
    """One pass in this process with the domain of service_dir; prints a JSON line."""
    sys.path.insert(0, service_dir)
    from gpu_tenancy.domain import reclaim
    from gpu_tenancy.domain.model import Hold, Host, LeaseRequest, QuotaLimit
    from gpu_tenancy.domain.planner import plan
    m = "A100"
    hs = [Host(f"h{i:03d}", m, 8) for i in range(hosts)]
    holds = [Hold(f"b{k:04d}", "borrower", f"h{k % hosts:03d}", m, 1, NOW - 2 * H - k * 60, NOW + 10 * H, True, False, 0)
             for k in range(8 * hosts)]
    rng = random.Random(0)
    asks = [LeaseRequest(f"w{i:04d}", "lender", m, rng.choice([1, 2, 4, 8]), 1, rng.randint(1, 12) * H, NOW, None,
                         NOW - 600 + i, 0) for i in range(waiting)]
    asks.append(LeaseRequest("big", "lender", m, 8, 1, 2 * H, NOW, None, NOW, 0))
    quotas = {("lender", m): QuotaLimit("lender", m, 10 ** 4),
              ("borrower", m): QuotaLimit("borrower", m, 0, borrow_gpus=10 ** 5)}
    current = plan(NOW, hs, holds, quotas, asks)
    made = [0]
    # the planner's plan() as reclaim.py calls it, wrapped to count the calls (mypy: not a re-export)
    plain = reclaim.plan   # type: ignore[attr-defined]

    def counted(*args, **kw):
        made[0] += 1
        return plain(*args, **kw)
    reclaim.plan = counted   # type: ignore[attr-defined]
    settings = reclaim.ReclaimSettings(reclaim_after=H, notice=900, min_runtime=H)
    c0 = time.process_time()
    out = reclaim.early_ends(NOW, hs, holds, quotas, asks, None, current, settings)
    cpu = time.process_time() - c0
    print(json.dumps({"cpu": cpu, "plans": made[0], "ended": len(out.ends),
                      "ends": sorted((e.lease_id, e.for_lease) for e in out.ends)}))


def run(service_dir: str, hosts: int, waiting: int) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", service_dir, "--hosts", str(hosts),
                          "--waiting", str(waiting)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="20,100", help="host counts (8 one-GPU borrowers each)")
    ap.add_argument("--waiting", default="0,200", help="leases waiting ahead of the 8-GPU one")
    ap.add_argument("--against", metavar="REF", help="side by side with the domain of this git ref")
    ap.add_argument("--child", metavar="SERVICE_DIR", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, int(a.hosts), int(a.waiting))
        return 0
    new = os.path.join(HERE, "..", "service")
    with tempfile.TemporaryDirectory() as tmp:
        # (the ref's service/ alone, its scan index built: bench/git_export.py)
        old = os.path.join(export_ref(a.against, tmp, ("service",)), "service") if a.against else None
        print(f"one reclaim pass, CPU seconds and trial plans{f'; this tree (new) against {a.against} (old)' if old else ''}")
        print(f"{'hosts':>5} {'borrowers':>9} {'waiting':>7} {'new cpu s':>9} {'plans':>6} {'ended':>5}"
              + (f" {'old cpu s':>9} {'plans':>6} {'ended':>5} {'new/old':>7} {'same ends':>9}" if old else ""))
        for hosts in [int(x) for x in a.hosts.split(",")]:
            for waiting in [int(x) for x in a.waiting.split(",")]:
                n = run(new, hosts, waiting)
                line = f"{hosts:>5} {8 * hosts:>9} {waiting:>7} {n['cpu']:>9.2f} {n['plans']:>6} {n['ended']:>5}"
                if old:
                    o = run(old, hosts, waiting)
                    line += (f" {o['cpu']:>9.2f} {o['plans']:>6} {o['ended']:>5} {n['cpu'] / o['cpu']:>7.3f}"
                             f" {'yes' if n['ends'] == o['ends'] else 'no':>9}")
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

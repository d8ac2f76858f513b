"""Is the what-if's "current" side what the engine did? Leases of the demo's two projects and
seven shapes (A100 and H100, the demo's quotas with borrowing) are asked for through the real
service (Flask API, ledger, Lifecycle ticks, SQLite, the simulated cloud with no boot or release
time, a virtual clock jumped from event to event, as bench/engine_replay.py does); then the
history is read back from that database (engine/whatif_history.py) and replayed with the
what-if (whatif/replay.py) under the same settings. Prints how many leases start at the same
second in both. Slow (a request and a tick per event): a few hundred leases.

    python bench/whatif_engine.py --days 3 --per-day 40
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "service"))

from sqlalchemy import select  # noqa: E402

from gpu_tenancy.app import create_app  # noqa: E402
from gpu_tenancy.clock import VirtualClock  # noqa: E402
from gpu_tenancy.cloud.simulated import SimulatedCloud  # noqa: E402
from gpu_tenancy.config import Config  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from gpu_tenancy.db import models as m  # noqa: E402
from gpu_tenancy.db.session import session_scope, to_epoch  # noqa: E402
from gpu_tenancy.demo.history import requests  # noqa: E402
from gpu_tenancy.demo.seed import PROJECTS, SHAPES, seed  # noqa: E402
from gpu_tenancy.engine import whatif_history  # noqa: E402
from gpu_tenancy.whatif.replay import replay  # noqa: E402

T0 = 1_796_112_000
SHAPE = {(spec[0], spec[1]): name for name, spec in SHAPES.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=3)
    ap.add_argument("--per-day", type=float, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-borrow", action="store_true", help="quotas without borrowing (so no reclaim)")
    a = ap.parse_args(argv)
    asked = requests(sorted(PROJECTS), T0, a.days, a.per_day, random.Random(a.seed))
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{os.path.join(d, 'engine.db')}"
        migrate.upgrade(url)
        clock = VirtualClock(T0)
        cloud = SimulatedCloud({
            "boot_seconds": 0, "delete_seconds": 0,
            "gpu_models": {"A100": {"resource_class": "CUSTOM_PGPU_A100", "pci_alias": "a100"},
                           "H100": {"resource_class": "CUSTOM_PGPU_H100", "pci_alias": "h100"}},
            "hosts": [{"name": f"gpu-a100-{i}", "gpu_model": "A100", "gpus": 8, "aggregate": "a100"} for i in range(1, 5)]
            + [{"name": f"gpu-h100-{i}", "gpu_model": "H100", "gpus": 4, "aggregate": "h100"} for i in range(1, 3)],
            "images": [{"id": "00000000-0000-4000-8000-000000000001", "name": "replay-image"}],
        }, clock)
        config = Config.load(database_url=url, auth_strategy="noauth2", run_engine=True, host_refresh_seconds=10 ** 9,
                             warn_before_end_seconds=0, max_waiting_leases_per_project=10 ** 6,
                             max_waiting_leases_per_user=10 ** 6)
        app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
        rt = app.extensions["gpu_tenancy"]
        with session_scope(rt.sessions) as s:
            seed(s, clock.now(), cloud.images())
            if a.no_borrow:
                for q in s.scalars(select(m.Quota)):
                    q.borrow_gpus = 0
        rt.engine.lifecycle.refresh_hosts()
        client = app.test_client()
        ends: dict[str, int] = {}
        runtime: dict[str, int] = {}
        i, wall = 0, time.perf_counter()
        eta = None
        while i < len(asked) or len(ends) < len(runtime):
            cands = [asked[i].arrival] if i < len(asked) else []
            cands += [e for e in ends.values() if e > clock.now()]
            if eta is not None and eta > clock.now():
                cands.append(eta)
            if not cands:
                break
            clock.set(min(cands))
            rt.engine.run_once()
            while i < len(asked) and asked[i].arrival == clock.now():
                x = asked[i]
                r = client.post("/v1/leases", json={"name": x.jid[:8], "shape": SHAPE[(x.gpu_model, x.gpus_per_vm)],
                                                    "duration": f"PT{x.runtime}S"},
                                headers={"X-Project-Id": x.tenant, "X-User-Id": "u", "X-Roles": "member"})
                assert r.status_code == 201, r.get_json()
                runtime[r.get_json()["lease"]["id"]] = x.runtime
                i += 1
            rt.engine.run_once()
            with session_scope(rt.sessions) as s:
                for lid, st in s.execute(select(m.Lease.id, m.Lease.start_at).where(
                        m.Lease.status.not_in(("queued", "requested")), m.Lease.start_at.is_not(None))):
                    assert st is not None   # (is_not(None) above; likewise the ETAs below)
                    ends.setdefault(lid, to_epoch(st) + runtime[lid])
                eta = min((to_epoch(e) for e in s.scalars(select(m.Lease.queue_eta).where(
                    m.Lease.status == "queued", m.Lease.queue_eta.is_not(None))) if e is not None), default=None)
        clock.set(max(ends.values()) + 60)
        rt.engine.run_once()
        wall = time.perf_counter() - wall
        with session_scope(rt.sessions) as s:
            history = whatif_history.load(s, clock.now(), a.days + 30)
            early = set(s.scalars(select(m.Lease.id).where(m.Lease.early_end_kind.is_not(None))))
        t = time.perf_counter()
        out = replay(history, rt.planner_settings)
        fast = time.perf_counter() - t
        rt.sessions.kw["bind"].dispose()
    same = sum(1 for x in history.leases if out.start.get(x.jid) == history.actual_starts[x.jid])
    waited = sum(1 for x in history.leases if history.actual_starts[x.jid] > x.arrival)
    print(f"{len(asked)} leases asked over {a.days:g} days on the demo's hosts (32 A100, 8 H100), {waited} waited; "
          f"{len(history.leases)} in the history read back")
    print(f"same start in the engine and the what-if replay: {same} of {len(history.leases)}")
    with_notice = sum(1 for x in history.leases if x.jid in early)
    print(f"leases the engine ended early with notice (reclaim, preemption; the replay has none): {with_notice}")
    print(f"wall: engine {wall:.0f} s, what-if replay {fast:.2f} s")
    for x in history.leases:
        if out.start.get(x.jid) != history.actual_starts[x.jid]:
            print(f"  differs: {x.jid[:8]} {x.tenant} {x.gpu_model} x{x.gpus}: engine "
                  f"{history.actual_starts[x.jid] - x.arrival} s, what-if {out.start.get(x.jid, -1) - x.arrival} s")
            break
    return 0 if same == len(history.leases) else 1


if __name__ == "__main__":
    sys.exit(main())

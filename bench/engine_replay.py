"""The same replay driven through the real service: Flask API (POST
/v1/leases), ledger.replan, Lifecycle.tick (EngineRunner.run_once), SQLite in
a temporary file, the SimulatedCloud (boot 0 s, delete 0 s) and a
VirtualClock jumped from event to event. Slow (a database and HTTP request
per lease), so it runs a slice and checks that the fast path
(planner_sched.GpuTenancy on event_loop.simulate) starts every job at the
same time.

    python bench/engine_replay.py --jobs 300 --hosts 6 --quota quota
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "service"))

import yaml  # noqa: E402
from sqlalchemy import select  # noqa: E402

from gpu_tenancy.app import create_app  # noqa: E402
from gpu_tenancy.clock import VirtualClock  # noqa: E402
from gpu_tenancy.cloud.simulated import SimulatedCloud  # noqa: E402
from gpu_tenancy.config import Config  # noqa: E402
from gpu_tenancy.db import migrate  # noqa: E402
from gpu_tenancy.db import models as m  # noqa: E402
from gpu_tenancy.db.session import session_scope, to_epoch, utcnow_naive  # noqa: E402
from gpu_tenancy.demo.seed import seed  # noqa: E402
from gpu_tenancy.domain.eta_honesty import ETA_SLACK  # noqa: E402
from gpu_tenancy.domain.planner import PlannerSettings  # noqa: E402
from gpu_tenancy.domain.start_by import told_start_bys  # noqa: E402
from gpu_tenancy.engine import quotas as quota_api  # noqa: E402

import replay  # noqa: E402
from metrics import load_classes_at  # noqa: E402
import traces  # noqa: E402
from gpu_tenancy.whatif.cluster_model import hosts_for_load, offered_load, window_of  # noqa: E402
from gpu_tenancy.whatif.event_loop import simulate  # noqa: E402
from gpu_tenancy.whatif.planner_sched import MODEL, GpuTenancy, quota_limits  # noqa: E402


def run_engine(jobs, n_hosts: int, limits, host_gpus: int, half_life: int, workdir: str, keep_etas: bool = False,
               fit_min_waiting: int | None = None) -> tuple[dict, dict, dict, float, dict]:
    """Each job's start, first ETA (leases.first_eta, None if it never waited) and first start-by,
    the wall time, and the jobs the engine ended early (reclaimed or preempted) with the end their
    notice gave them. `fit_min_waiting`: the plan length from which a create fits its lease into
    the plan (the service's plan_insert_min_waiting; None: its default)."""
    url = f"sqlite:///{os.path.join(workdir, 'replay.db')}"
    fit: dict[str, Any] = {} if fit_min_waiting is None else {"plan_insert_min_waiting": fit_min_waiting}
    migrate.upgrade(url)
    clock = VirtualClock(jobs[0].arrival)
    cloud = SimulatedCloud({
        "boot_seconds": 0, "delete_seconds": 0,
        "gpu_models": {MODEL: {"resource_class": "CUSTOM_PGPU_GPU", "pci_alias": "gpu"}},
        "hosts": [{"name": f"h{i:04d}", "gpu_model": MODEL, "gpus": host_gpus} for i in range(n_hosts)],
        "images": [{"id": "00000000-0000-4000-8000-000000000001", "name": "replay-image"}],
    }, clock)
    config = Config.load(database_url=url, auth_strategy="noauth2", run_engine=True,
                         fairshare_half_life_seconds=half_life, host_refresh_seconds=10 ** 9,
                         warn_before_end_seconds=0,
                         # a trace tenant has hundreds waiting at once: the per-user and project limits off
                         max_waiting_leases_per_project=10 ** 6, max_waiting_leases_per_user=10 ** 6,
                         planner_keep_etas=keep_etas, **fit)
    app = create_app(config, clock=clock, cloud=cloud, start_engine=False)
    rt = app.extensions["gpu_tenancy"]
    now = clock.now()
    with session_scope(rt.sessions) as s:
        seed(s, now, cloud.images())
        for g in range(1, host_gpus + 1):
            s.add(m.Shape(name=f"gpu.x{g}", gpu_model=MODEL, gpus=g, vcpus=g, ram_mb=1024 * g, disk_gb=10,
                          pci_alias="gpu", created_at=utcnow_naive(now)))
    rt.engine.lifecycle.refresh_hosts()
    with session_scope(rt.sessions) as s:
        for (tenant, _), q in limits.items():
            quota_api.replace(s, lambda: now, rt.config, rt.planner_settings, tenant, {MODEL: {
                "gpus": q.gpus, "borrow_gpus": q.borrow_gpus, "weight": q.weight}})
    client = app.test_client()
    by_lease: dict[str, traces.Job] = {}
    started: dict[str, int] = {}
    ends: dict[str, int] = {}
    i, wall = 0, time.perf_counter()

    def collect():
        with session_scope(rt.sessions) as s:
            rows = s.execute(select(m.Lease.id, m.Lease.start_at, m.Lease.status).where(
                m.Lease.id.in_([k for k in by_lease if k not in started]))).all()
            etas = s.execute(select(m.Lease.queue_eta, m.Lease.planned_hosts).where(
                m.Lease.status == "queued", m.Lease.queue_eta.is_not(None))).all()
            # the queue's ETAs, and a notice before each that a reclaim announces for later (no
            # planned hosts: early_ends.replan): the running engine looks every few seconds, so it
            # decides that reclaim once the borrower's minimum runtime has run out
            notice = rt.config.reclaim_notice_seconds
            eta = min((to_epoch(e) - notice if hosts is None and to_epoch(e) - notice > clock.now() else to_epoch(e)
                       for e, hosts in etas), default=None)
            # a lease told to end early (a reclaim) ends at its notice's end: an event, as its own end is;
            # one whose notice was called off (early_ends.call_off_unneeded) ends at its own end again
            cut = s.execute(select(m.Lease.id, m.Lease.early_end_at).where(m.Lease.status == "active")).all()
        for lid, st, status in rows:
            if status not in ("queued", "requested") and st is not None:
                started[lid] = to_epoch(st)
                ends[lid] = to_epoch(st) + by_lease[lid].runtime
        for lid, at in cut:
            if lid in started:
                own = started[lid] + by_lease[lid].runtime
                ends[lid] = own if at is None else min(own, to_epoch(at))
        return eta

    eta = None
    while i < len(jobs) or len(started) < len(by_lease):
        cands = [jobs[i].arrival] if i < len(jobs) else []
        cands += [e for lid, e in ends.items() if e > clock.now()]
        if eta is not None and eta > clock.now():
            cands.append(eta)
        t = min(cands)
        clock.set(t)
        rt.engine.run_once()            # ends first, then replan and starts
        while i < len(jobs) and jobs[i].arrival == t:
            j = jobs[i]
            r = client.post("/v1/leases", json={"name": j.jid, "shape": f"gpu.x{j.gpus_per_vm}",
                                                "instances": j.vms, "duration": f"PT{j.duration}S"},
                            headers={"X-Project-Id": j.tenant, "X-User-Id": "u", "X-Roles": "member"})
            assert r.status_code == 201, r.get_json()
            by_lease[r.get_json()["lease"]["id"]] = j
            i += 1
        rt.engine.run_once()
        eta = collect()
    wall = time.perf_counter() - wall
    with session_scope(rt.sessions) as s:
        told = s.execute(select(m.Lease.id, m.Lease.first_eta, m.Lease.first_start_by)).all()
        cut = s.execute(select(m.Lease.id, m.Lease.early_end_at).where(m.Lease.early_end_at.is_not(None))).all()
    first_eta = {by_lease[lid].jid: to_epoch(e) for lid, e, _by in told}
    start_by = {by_lease[lid].jid: to_epoch(by) for lid, _e, by in told if by is not None}
    rt.sessions.kw["bind"].dispose()
    ended_early = {by_lease[lid].jid: to_epoch(at) for lid, at in cut}
    return {by_lease[lid].jid: st for lid, st in started.items()}, first_eta, start_by, wall, ended_early


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="philly-final")
    ap.add_argument("--jobs", type=int, default=300, help="the first JOBS jobs of the trace")
    ap.add_argument("--load", type=float, default=0.95)
    ap.add_argument("--hosts", type=int, help="this many hosts instead of sizing by --load")
    ap.add_argument("--quota", choices=("open", "quota"), default="open")
    ap.add_argument("--traces", default=traces.default_trace_dir(),
                    help=f"directory of the trace CSVs (default ${traces.TRACES_ENV})")
    ap.add_argument("--config", default=os.path.join(HERE, "replay.yaml"))
    ap.add_argument("--keep-etas", action="store_true", help="both with the planner's keep_etas on")
    a = ap.parse_args(argv)
    if not a.traces:
        ap.error(f"give --traces or set {traces.TRACES_ENV} to the directory of the trace CSVs")
    cfg = yaml.safe_load(open(a.config))
    jobs, shares = replay.load_jobs(cfg, a.trace, a.traces, None, None)
    jobs = jobs[:a.jobs]
    shares = {t: s for t, s in shares.items() if any(j.tenant == t for j in jobs)}
    total = sum(shares.values())
    shares = {t: s / total for t, s in shares.items()}
    n_hosts = a.hosts or hosts_for_load(jobs, a.load, window_of(jobs), cfg["host_gpus"])
    load = offered_load(jobs, n_hosts * cfg["host_gpus"], window_of(jobs))
    cap = n_hosts * cfg["host_gpus"]
    limits = quota_limits(shares, cap, a.quota)
    hl = cfg["fairshare_half_life_seconds"]
    t = time.perf_counter()
    fast = simulate(jobs, n_hosts, GpuTenancy(limits, hl, settings=PlannerSettings(keep_etas=a.keep_etas)))
    fast_wall = time.perf_counter() - t
    assert fast.first_eta is not None   # GpuTenancy tells each job an ETA (planner_sched: first_eta = {})
    with tempfile.TemporaryDirectory() as d:
        eng, eng_eta, eng_by, eng_wall, eng_cut = run_engine(jobs, n_hosts, limits, cfg["host_gpus"], hl, d,
                                                             a.keep_etas)
    same = sum(1 for j in jobs if eng.get(j.jid) == fast.start[j.jid])
    waited = sum(1 for j in jobs if fast.start[j.jid] > j.arrival)
    diffs = [(j.jid, fast.start[j.jid] - j.arrival, eng.get(j.jid, -1) - j.arrival)
             for j in jobs if eng.get(j.jid) != fast.start[j.jid]]
    print(f"{a.trace}, first {len(jobs)} jobs ({(jobs[-1].arrival - jobs[0].arrival) / 3600:.1f} h), "
          f"{n_hosts} hosts x {cfg['host_gpus']}, offered load {load:.2f}, quotas {a.quota}"
          f"{', keep_etas' if a.keep_etas else ''}: {waited} jobs waited")
    print(f"same start time in engine and fast replay: {same} of {len(jobs)}")
    # the ETA the API answered at creation (stored as first_eta) against the fast replay's first plan
    told = [j for j in jobs if fast.start[j.jid] > j.arrival]
    same_eta = sum(1 for j in told if eng_eta.get(j.jid) == fast.first_eta.get(j.jid))
    print(f"same first ETA for the jobs that waited: {same_eta} of {len(told)}")
    # borrowed GPUs reclaimed for a lease within its quota (quotas 'quota' only: open ones lend nothing)
    print(f"ended early by a reclaim: engine {len(eng_cut)}, fast replay {len(fast.ended_early)}, "
          f"at the same second {sum(fast.ended_early.get(j) == at for j, at in eng_cut.items())}")
    # the start-by the service told (its margins, load classes among them, computed once a minute)
    # against the model's, which learns at every start (bench/metrics.py), on the same leases
    model_by = told_start_bys(((j.tenant, j.jid, j.arrival, fast.first_eta[j.jid], fast.start[j.jid])
                               for j in told if j.jid in fast.first_eta), None,
                              load_classes_at(fast, jobs, shares, cap))
    both = [j for j in told if j.jid in model_by and j.jid in eng_by and j.jid in eng]
    if both:
        kept_eng = sum(eng[j.jid] <= eng_by[j.jid] + ETA_SLACK for j in both) / len(both)
        kept_model = sum(fast.start[j.jid] <= model_by[j.jid] + ETA_SLACK for j in both) / len(both)
        same_by = sum(eng_by[j.jid] == model_by[j.jid] for j in both)
        print(f"start-by: {same_by} of {len(both)} the same as the model's; kept: service {kept_eng:.1%}, "
              f"model {kept_model:.1%}")
    print(f"wall: engine {eng_wall:.1f} s ({1000 * eng_wall / len(jobs):.0f} ms/job), "
          f"fast {fast_wall:.2f} s ({1000 * fast_wall / len(jobs):.1f} ms/job), ratio {eng_wall / fast_wall:.0f}x")
    for jid, wait_fast, wait_engine in diffs[:10]:
        print(f"  differs: {jid} wait fast {wait_fast} s, engine {wait_engine} s")
    return 0 if same == len(jobs) and same_eta == len(told) and eng_cut == fast.ended_early else 1


if __name__ == "__main__":
    sys.exit(main())

"""Block until the loopback cloud can take GPU boots; start.sh's last step.

Ready means:
  * nova-conductor, nova-scheduler and every compute host are up, and each of
    them has sent a heartbeat since ``--since`` (a row left over from the
    previous run counts as "up" for service_down_time seconds; that is not
    enough);
  * placement has ``--gpus`` GPU resource providers (children of the hosts);
  * every compute host is mapped to cell1 and listed as a hypervisor (when the
    scheduler's periodic discovery hasn't done it yet, ``nova-manage cell_v2
    discover_hosts`` is run);
  * cinder-volume is up with a fresh heartbeat, and cinder-scheduler knows its
    pool (before that, volume creates fail with "No valid backend");
  * Heat answers GET /build_info, which heat-api can only answer with a reply
    from heat-engine over RabbitMQ (checked last: until the engine listens,
    heat-api waits for it up to its RPC timeout).

Usage: python wait_ready.py --since EPOCH --hosts "h1 h2" --gpus N --nova-conf FILE [--timeout S]
"""

import argparse
import datetime
import os
import subprocess
import sys
import time

import openstack

# the clouds.yaml of the state dir, unless the caller points elsewhere
_STATE = os.environ.get("GT_LOOPBACK_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".loopback")
os.environ.setdefault("OS_CLIENT_CONFIG_FILE", os.path.join(_STATE, "clouds.yaml"))

T0 = time.time()


def log(msg):
    print(f"[ready {time.time() - T0:5.1f}s] {msg}", flush=True)


def heartbeat_after(svc, since):
    if not svc.updated_at:
        return False
    ts = datetime.datetime.fromisoformat(svc.updated_at.replace("Z", ""))
    return ts.replace(tzinfo=datetime.timezone.utc).timestamp() >= since


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--since", type=float, required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--nova-conf", required=True)
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    hosts = set(args.hosts.split())
    since = int(args.since)  # DB timestamps have whole seconds
    nova_manage = os.path.join(os.path.dirname(sys.executable), "nova-manage")
    conn = openstack.connect(cloud="gt-admin")

    pending = {"compute", "gpus", "cinder-volume", "hypervisors", "heat"}
    last_discover = 0.0
    status = {}
    while pending:
        try:
            if "compute" in pending or "hypervisors" in pending:
                svcs = list(conn.compute.services())
                fresh = {(s.binary, s.host) for s in svcs if s.state == "up" and heartbeat_after(s, since)}
                control = {b for b, _ in fresh} >= {"nova-conductor", "nova-scheduler"}
                up = {h for b, h in fresh if b == "nova-compute"}
                status["computes up"] = sorted(up & hosts)
                if "compute" in pending and control and hosts <= up:
                    pending.discard("compute")
                    log(f"nova-conductor, nova-scheduler and {len(hosts)} computes up with fresh heartbeats")
            if "gpus" in pending:
                gpus = [rp for rp in conn.placement.resource_providers()
                        if rp.parent_provider_id and "_0000:" in rp.name]
                status["gpu providers"] = len(gpus)
                if len(gpus) >= args.gpus:
                    pending.discard("gpus")
                    log(f"{len(gpus)} GPU resource providers in placement")
            if "cinder-volume" in pending:
                vol = [s for s in conn.block_storage.services()
                       if s.binary == "cinder-volume" and s.state == "up" and heartbeat_after(s, since)]
                # up is not enough: the scheduler must have had the backend's capacity report
                pools = list(conn.block_storage.backend_pools()) if vol else []
                status["cinder-volume up, pools"] = (bool(vol), len(pools))
                if vol and pools:
                    pending.discard("cinder-volume")
                    log("cinder-volume up, its pool known to cinder-scheduler")
            if "hypervisors" in pending and "compute" not in pending:
                mapped = {h.name for h in conn.compute.hypervisors()}
                status["hypervisors"] = sorted(mapped & hosts)
                if hosts <= mapped:
                    pending.discard("hypervisors")
                    log(f"{len(hosts)} hypervisors mapped to cell1")
                elif time.time() - last_discover > 15:
                    last_discover = time.time()
                    out = subprocess.run([nova_manage, "--config-file", args.nova_conf,
                                          "cell_v2", "discover_hosts"],
                                         capture_output=True, text=True)
                    log(f"nova-manage cell_v2 discover_hosts: exit {out.returncode}")
                    continue
            if pending == {"heat"}:
                info = conn.orchestration.get("/build_info", raise_exc=False)
                status["heat build_info"] = info.status_code
                if info.status_code == 200 and "engine" in info.json():
                    pending.discard("heat")
                    log("heat-api answers, with heat-engine's reply")
        except Exception as e:  # an API still starting up, keystone busy, ...
            status["last error"] = str(e).splitlines()[0][:160]
        if not pending:
            break
        if time.time() - T0 > args.timeout:
            log(f"NOT READY after {args.timeout:.0f}s; waiting for {sorted(pending)}; {status}")
            return 1
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Stop or start the nova-compute of one fake host of a running loopback stack,
# e.g. for host-down tests:
#
#   bash scripts/loopback/compute.sh stop gpu-h100-1    # TERM by pid (KILL after GT_STOP_TIMEOUT s)
#   bash scripts/loopback/compute.sh start gpu-h100-1   # same host, same node UUID, same GPUs
#
# Nova reports the host down about service_down_time (20 s) after its last
# heartbeat; a restarted host is up again within a few heartbeats (5 s each).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LB_TAG=compute

action="${1:-}" host="${2:-}"
[ -n "$host" ] || { echo "usage: compute.sh start|stop HOST  (hosts: $LB_COMPUTES)" >&2; exit 2; }
pidfile="$LB_RUN/nova-compute-$host.pid"
case "$action" in
    stop)
        stop_group "nova-compute-$host"
        ;;
    start)
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            die "nova-compute-$host is running already (pid $(cat "$pidfile"))"
        fi
        launch_compute "$host"
        say "started nova-compute-$host (pid $(cat "$pidfile"))"
        ;;
    *)
        echo "usage: compute.sh start|stop HOST" >&2; exit 2
        ;;
esac

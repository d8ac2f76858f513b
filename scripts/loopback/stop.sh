#!/usr/bin/env bash
# Stop the loopback OpenStack that start.sh started, by the pids in run/ only.
#
#   bash scripts/loopback/stop.sh           stop; data stays (next start is a warm one)
#   bash scripts/loopback/stop.sh --purge   stop, then delete data, logs, run, etc and
#                                           clouds.yaml (next start is a first one);
#                                           the installed venv and uv stay
#
# Each process gets SIGTERM; whatever of it (or of its children) is still alive
# after GT_STOP_TIMEOUT seconds (default 20) gets SIGKILL. The OpenStack services
# go first, all at once, then RabbitMQ and MariaDB, then epmd.
set -uo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LB_TAG=stop

purge=0
case "${1:-}" in
    --purge) purge=1 ;;
    "") ;;
    *) echo "usage: stop.sh [--purge]" >&2; exit 2 ;;
esac

computes=()
for f in "$LB_RUN"/nova-compute-*.pid; do [ -e "$f" ] && computes+=("$(basename "$f" .pid)"); done

stop_group "${computes[@]}" nova-api nova-conductor nova-scheduler \
    cinder-api cinder-scheduler cinder-volume placement glance keystone neutron-api heat-api heat-engine
stop_group rabbitmq mariadb
stop_group epmd

# anything else start.sh may have left a pid for
left=()
for f in "$LB_RUN"/*.pid; do [ -e "$f" ] && left+=("$(basename "$f" .pid)"); done
[ ${#left[@]} -eq 0 ] || stop_group "${left[@]}"

if [ $purge = 1 ]; then
    rm -rf "$LB_DATA" "$LB_LOGS" "$LB_RUN" "$LB_ETC" "$LB_CLOUDS"
    say "purged data, logs, run, etc and clouds.yaml under $LB_STATE"
fi
say "done in $(elapsed) s"

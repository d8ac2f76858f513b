# Shared settings for the loopback OpenStack scripts. Sourced, never run.
#
# Everything the stack writes lives under one state directory:
#   $GT_LOOPBACK_DIR (default: <repo>/.loopback)
#     tools/  uv            venv/  the OpenStack services     etc/   generated config
#     data/   DBs, images   logs/  one log per process        run/   one pid file per process
#     clouds.yaml           the clouds for tests and the service

LB_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"           # scripts/loopback
LB_REPO="$(cd "$LB_HOME/../.." && pwd)"
LB_STATE="${GT_LOOPBACK_DIR:-$LB_REPO/.loopback}"
LB_TOOLS="$LB_STATE/tools"
LB_VENV="$LB_STATE/venv"
LB_ETC="$LB_STATE/etc"
LB_DATA="$LB_STATE/data"
LB_LOGS="$LB_STATE/logs"
LB_RUN="$LB_STATE/run"
LB_CLOUDS="$LB_STATE/clouds.yaml"
LB_LOCK="$LB_HOME/requirements.lock"
LB_PY="$LB_VENV/bin/python"

# Everything binds to loopback. Ports:
LB_IP=127.0.0.1
LB_KEYSTONE_URL="http://$LB_IP:5000/v3"

# The three fake GPU hosts: name:gpu-count:pci-product-id (20b5 = A100, 2330 = H100).
LB_COMPUTES="gpu-a100-1:4:20b5 gpu-a100-2:4:20b5 gpu-h100-1:2:2330"

# Pinned tool versions (the Python packages are pinned in requirements.lock).
LB_UV_VERSION=0.13.9

_lb_t0=$(date +%s%N)
# say MSG: a line prefixed with the seconds since the script started
say() {
    local ds=$(( ($(date +%s%N) - _lb_t0) / 100000000 ))
    printf '[%s %3d.%ds] %s\n' "${LB_TAG:-loopback}" $((ds / 10)) $((ds % 10)) "$*"
}
die() { say "ERROR: $*" >&2; exit 1; }
elapsed() { echo $(( ($(date +%s%N) - _lb_t0) / 1000000000 )); }

# tree_pids PID: PID and all its descendants, parents first
tree_pids() {
    local p
    echo "$1"
    for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree_pids "$p"; done
}

# launch NAME CMD...: run CMD in the background, log to logs/NAME.log, pid to run/NAME.pid.
# nohup and env exec, so $! is the service process itself.
launch() {
    local name=$1; shift
    echo "==== $(date -u +%FT%TZ) start.sh" >> "$LB_LOGS/$name.log"
    nohup "$@" >> "$LB_LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$LB_RUN/$name.pid"
}

# launch_compute HOST: the nova-compute of one fake host of $LB_COMPUTES
launch_compute() {
    local spec host count product
    for spec in $LB_COMPUTES; do
        IFS=: read -r host count product <<< "$spec"
        [ "$host" = "$1" ] || continue
        launch "nova-compute-$host" env GT_FAKE_GPUS="$count" GT_FAKE_GPU_PRODUCT="$product" \
            "$LB_VENV/bin/nova-compute" --config-file "$LB_ETC/nova/nova.conf" \
            --config-file "$LB_ETC/nova-compute/$host.conf"
        return 0
    done
    die "no host $1 in: $LB_COMPUTES"
}

# stop_group NAME...: TERM the named processes together, KILL what outlives the timeout
stop_group() {
    local name pid p i alive
    local -a mains=() names=() tree=()
    for name in "$@"; do
        [ -f "$LB_RUN/$name.pid" ] || continue
        pid="$(tr -dc '0-9' < "$LB_RUN/$name.pid")"
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            mains+=("$pid"); names+=("$name")
            # children too: a KILLed parent would leave its workers behind
            tree+=($(tree_pids "$pid"))
        fi
        rm -f "$LB_RUN/$name.pid"
    done
    [ ${#mains[@]} -gt 0 ] || return 0
    kill -TERM "${mains[@]}" 2>/dev/null
    for ((i = 0; i < ${GT_STOP_TIMEOUT:-20} * 5; i++)); do
        alive=0
        for p in "${tree[@]}"; do kill -0 "$p" 2>/dev/null && { alive=1; break; }; done
        [ $alive = 0 ] && break
        sleep 0.2
    done
    for p in "${tree[@]}"; do
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null && say "pid $p did not stop in ${GT_STOP_TIMEOUT:-20}s: killed"
    done
    say "stopped ${names[*]}"
}

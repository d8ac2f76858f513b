#!/bin/sh
# GPU readiness probe, run once by cloud-init on a lease's VM: are the expected
# number of GPUs visible, and is each one usable? It reports the answer to the
# gpu-tenancy readiness URL of the lease, which shows the lease ready only then.
# It also installs the lease's commands, with the lease's secret readable by root only:
#   gpu-done [DETAIL]  the work is done: end the lease now and give its GPUs back
#                      (a job script's last line: `python train.py; gpu-done "exit $?"`)
#   gpu-agent          every minute, each GPU's utilisation and memory used to the
#                      lease's utilization URL (started here, as a systemd unit if it can)
#
# The same file serves the service's own user data and the HOT templates:
# both replace the @...@ placeholders below (the service in Python, Heat with
# str_replace), and the environment can override them when run by hand.
set -u
READINESS_URL="${READINESS_URL:-@READINESS_URL@}"      # .../v1/leases/<id>/readiness
READINESS_TOKEN="${READINESS_TOKEN:-@READINESS_TOKEN@}" # the lease's secret
EXPECTED_GPUS="${EXPECTED_GPUS:-@EXPECTED_GPUS@}"
INSTANCE="${INSTANCE:-@INSTANCE@}"                      # which VM of the lease (0 for one VM)
WAIT_SECONDS="${WAIT_SECONDS:-300}"                     # for the driver to come up after boot
PCI_DEVICES="${PCI_DEVICES:-/sys/bus/pci/devices}"
GT_ETC="${GT_ETC:-/etc/gpu-tenancy}"                   # the lease's settings (lease.env, mode 600)
GT_BIN="${GT_BIN:-/usr/local/bin}"                      # where gpu-done and gpu-agent go
AGENT_START="${AGENT_START:-yes}"                       # no: install gpu-agent, do not start it

# The lease's commands. Both read $GT_ETC/lease.env; the secret is in no command line.
install_commands() {
    ( umask 077 && mkdir -p "$GT_ETC" && printf "LEASE_URL='%s'\nLEASE_TOKEN='%s'\nINSTANCE='%s'\n" \
        "${READINESS_URL%/readiness}" "$READINESS_TOKEN" "$INSTANCE" > "$GT_ETC/lease.env" ) || return 1
    mkdir -p "$GT_BIN" || return 1
    cat > "$GT_BIN/gpu-done" <<'GPU_DONE'
#!/bin/sh
# gpu-done [DETAIL]: the work in this lease is done: end the lease now and give its
# GPUs back (its VMs are deleted, the data volume is kept). DETAIL goes in its events.
set -u
. "${GT_ETC:-/etc/gpu-tenancy}/lease.env"
# printable ASCII only: the service refuses a control character (C1 and DEL too) or a
# direction-turning one in the detail, and a cut through a UTF-8 character is not JSON
detail=$(printf '%s' "${1:-}" | LC_ALL=C tr -cd ' -~' | tr -d '"\\' | cut -c1-1000)
body=$(printf '{"instance": %s, "detail": "%s"}' "$INSTANCE" "$detail")
curl -fsS -m 20 --retry 5 --retry-delay 5 -X POST -H 'Content-Type: application/json' \
    -H "X-Lease-Token: $LEASE_TOKEN" -d "$body" "$LEASE_URL/done" && echo
GPU_DONE
    cat > "$GT_BIN/gpu-agent" <<'GPU_AGENT'
#!/bin/sh
# gpu-agent: every AGENT_INTERVAL seconds, each GPU's utilisation (%) and memory used (MiB)
# to the lease: from nvidia-smi, or without it from the PCI tree (a GPU with no driver is
# idle; gpu_busy_percent and mem_info_vram_used where the driver gives them). It stops when
# the service has refused it ten times in a row (the lease is over).
set -u
. "${GT_ETC:-/etc/gpu-tenancy}/lease.env"
INTERVAL="${AGENT_INTERVAL:-60}"
ROUNDS="${AGENT_ROUNDS:-0}"                      # 0: for ever
PCI_DEVICES="${PCI_DEVICES:-/sys/bus/pci/devices}"

# one "index utilization memory_used_mib" line per GPU, at most 16
samples() {
    if command -v nvidia-smi >/dev/null 2>&1 \
        && out=$(nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits 2>/dev/null); then
        echo "$out" | awk -F', *' '$1 ~ /^[0-9]+$/ { u = ($2 ~ /^[0-9]+$/) ? $2 : 0; m = ($3 ~ /^[0-9]+$/) ? $3 : 0;
            if (u > 100) u = 100; print $1, u, m }' | head -n 16
        return
    fi
    i=0
    for dev in "$PCI_DEVICES"/*; do
        [ -r "$dev/vendor" ] && [ "$(cat "$dev/vendor")" = "0x10de" ] || continue
        case "$(cat "$dev/class")" in 0x03*) ;; *) continue ;; esac
        u=$(cat "$dev/gpu_busy_percent" 2>/dev/null || echo 0)
        b=$(cat "$dev/mem_info_vram_used" 2>/dev/null || echo 0)
        echo "$i $u $b" | awk '{ u = ($2 ~ /^[0-9]+$/) ? $2 : 0; if (u > 100) u = 100;
            print $1, u, ($3 ~ /^[0-9]+$/) ? int($3 / 1048576) : 0 }'
        i=$((i + 1))
        [ "$i" -lt 16 ] || break
    done
}

refused=0
round=0
while :; do
    gpus=$(samples | awk 'BEGIN { sep = "" } { printf "%s{\"index\": %d, \"utilization\": %d, \"memory_used_mib\": %d}", sep, $1, $2, $3; sep = ", " }')
    body=$(printf '{"instance": %s, "gpus": [%s]}' "$INSTANCE" "$gpus")
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 20 -X POST -H 'Content-Type: application/json' \
        -H "X-Lease-Token: $LEASE_TOKEN" -d "$body" "$LEASE_URL/utilization")
    case "$code" in
        2??) refused=0 ;;
        403|404|409) refused=$((refused + 1)) ;;
    esac
    [ "$refused" -lt 10 ] || { echo "gpu-agent: the lease is over" >&2; exit 0; }
    round=$((round + 1))
    [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ] || exit 0
    sleep "$INTERVAL"
done
GPU_AGENT
    chmod 755 "$GT_BIN/gpu-done" "$GT_BIN/gpu-agent"
}

start_agent() {
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        printf '[Unit]\nDescription=gpu-tenancy GPU utilisation agent\nAfter=network-online.target\n\n[Service]\nExecStart=%s\nRestart=on-failure\nRestartSec=60\n\n[Install]\nWantedBy=multi-user.target\n' \
            "$GT_BIN/gpu-agent" > /etc/systemd/system/gpu-agent.service
        systemctl daemon-reload && systemctl enable --now gpu-agent.service
    else
        nohup "$GT_BIN/gpu-agent" >/dev/null 2>&1 &
    fi
}

installed=no
install_commands && installed=yes || echo "gpu readiness: could not install gpu-done and gpu-agent" >&2

# PCI display controllers (class 0x03xx) of NVIDIA (0x10de): visible whatever the driver does
pci_gpus() {
    n=0
    for dev in "$PCI_DEVICES"/*; do
        [ -r "$dev/vendor" ] || continue
        if [ "$(cat "$dev/vendor")" = "0x10de" ]; then
            case "$(cat "$dev/class")" in 0x03*) n=$((n + 1)) ;; esac
        fi
    done
    echo "$n"
}

# A GPU is usable when the driver answers for it by index and reports no error state.
usable_gpus() {
    command -v nvidia-smi >/dev/null 2>&1 || { echo 0; return; }
    n=0
    i=0
    while [ "$i" -lt "$1" ]; do
        if out=$(nvidia-smi -i "$i" --query-gpu=name,memory.total,temperature.gpu --format=csv,noheader 2>&1) \
            && ! echo "$out" | grep -qE 'ERR!|Unknown Error|No devices'; then
            n=$((n + 1))
        fi
        i=$((i + 1))
    done
    echo "$n"
}

deadline=$(( $(date +%s) + WAIT_SECONDS ))
while :; do
    visible=$(pci_gpus)
    usable=$(usable_gpus "$visible")
    if [ "$visible" -eq "$EXPECTED_GPUS" ] && [ "$usable" -eq "$EXPECTED_GPUS" ]; then
        ok=true
        detail="$usable of $EXPECTED_GPUS GPUs visible and usable"
        break
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        ok=false
        if command -v nvidia-smi >/dev/null 2>&1; then driver="nvidia-smi present"; else driver="no nvidia-smi (driver not installed?)"; fi
        detail="expected $EXPECTED_GPUS GPUs: $visible visible on PCI, $usable usable; $driver"
        break
    fi
    sleep 10
done

body=$(printf '{"instance": %s, "ok": %s, "gpus_visible": %s, "gpus_usable": %s, "detail": "%s"}' \
    "$INSTANCE" "$ok" "$visible" "$usable" "$detail")
echo "gpu readiness: $body"
# The service may be briefly unreachable while the VM's network comes up: retry.
attempt=0
reported=no
while [ "$attempt" -lt 10 ]; do
    if curl -fsS -m 20 -X POST -H 'Content-Type: application/json' \
        -H "X-Lease-Token: $READINESS_TOKEN" -d "$body" "$READINESS_URL"; then
        reported=yes
        break
    fi
    attempt=$((attempt + 1))
    sleep 15
done
[ "$installed" = yes ] && [ "$AGENT_START" = yes ] && start_agent
[ "$reported" = yes ] && exit 0
echo "gpu readiness: could not reach $READINESS_URL" >&2
exit 1

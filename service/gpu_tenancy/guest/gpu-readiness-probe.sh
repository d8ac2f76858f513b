#!/bin/sh
# GPU readiness probe, run once by cloud-init on a lease's VM: are the expected
# number of GPUs visible, and is each one usable? It reports the answer to the
# gpu-tenancy readiness URL of the lease, which shows the lease ready only then.
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
while [ "$attempt" -lt 10 ]; do
    if curl -fsS -m 20 -X POST -H 'Content-Type: application/json' \
        -H "X-Lease-Token: $READINESS_TOKEN" -d "$body" "$READINESS_URL"; then
        exit 0
    fi
    attempt=$((attempt + 1))
    sleep 15
done
echo "gpu readiness: could not reach $READINESS_URL" >&2
exit 1

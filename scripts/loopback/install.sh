#!/usr/bin/env bash
# Install what the loopback OpenStack needs. Safe to run again: each step is
# skipped when it is already done.
#
#   bash scripts/loopback/install.sh
#       Debian packages (MariaDB, RabbitMQ), uv, and the services' venv installed
#       exactly as requirements.lock says.
#
#   bash scripts/loopback/install.sh --relock CONSTRAINTS_FILE
#       Maintenance only: resolve the top-level packages below afresh against an
#       OpenStack upper-constraints file, write requirements.lock from the result,
#       then install as usual. Commit the new lock.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LB_TAG=install

# The release set, one OpenStack cycle. Only used by --relock; the lock pins the rest.
TOP_LEVEL=(
    keystone==30.0.0
    openstack-placement==16.0.0
    nova==34.0.0
    glance==33.0.0
    cinder==29.0.0
    neutron==29.0.0
    openstack-heat==27.0.1
    pyroute2          # neutron imports it (server side too) but does not declare it
    gunicorn
    PyMySQL
    openstacksdk
)

relock_from=""
if [ "${1:-}" = "--relock" ]; then
    relock_from="$(realpath "${2:?--relock needs a constraints file}")"
fi

mkdir -p "$LB_STATE"

# ---- 1. Debian packages -----------------------------------------------------
# We run mariadbd and rabbitmq ourselves, as root, with their data under the
# state dir. The packages' own init scripts must not start a second copy on the
# same ports, so a policy-rc.d that refuses every start is in place while apt runs.
if command -v mariadbd >/dev/null && [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] && command -v epmd >/dev/null \
        && command -v curl >/dev/null; then
    say "Debian packages already installed"
else
    say "apt-get install mariadb-server rabbitmq-server curl"
    policy=/usr/sbin/policy-rc.d
    saved=""
    if [ -e "$policy" ]; then saved="$(mktemp)"; cp -p "$policy" "$saved"; fi
    printf '#!/bin/sh\n# no daemon starts during package installs (gpu-tenancy loopback)\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    restore_policy() { if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi; }
    trap restore_policy EXIT
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends mariadb-server rabbitmq-server curl >/dev/null
    restore_policy
    trap - EXIT
    # On a machine that boots with systemd, keep the distro units off as well.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        systemctl disable --now mariadb rabbitmq-server epmd.socket epmd.service >/dev/null 2>&1 || true
    fi
    say "Debian packages installed"
fi

# ---- 2. uv --------------------------------------------------------------------
UV="$LB_TOOLS/bin/uv"
if [ -x "$UV" ] && [ "$("$UV" --version | cut -d' ' -f2)" = "$LB_UV_VERSION" ]; then
    say "uv $LB_UV_VERSION already there"
else
    say "pip install uv==$LB_UV_VERSION"
    rm -rf "$LB_TOOLS"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$LB_TOOLS" "uv==$LB_UV_VERSION"
fi
export UV_CACHE_DIR="${UV_CACHE_DIR:-$LB_STATE/cache/uv}"
export UV_NO_PROGRESS=1

# ---- 3. the services' venv ----------------------------------------------------
if [ ! -x "$LB_PY" ]; then
    say "creating $LB_VENV"
    "$UV" venv -q --python "$(command -v python3)" "$LB_VENV"
fi

if [ -n "$relock_from" ]; then
    say "resolving ${TOP_LEVEL[*]} against $(basename "$relock_from")"
    "$UV" pip install -q --python "$LB_PY" -c "$relock_from" "${TOP_LEVEL[@]}"
    pyver="$("$LB_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    {
        echo "# Every package of the loopback OpenStack venv, pinned (uv pip freeze)."
        echo "# Resolved for CPython $pyver from: ${TOP_LEVEL[*]}"
        echo "# against OpenStack's upper-constraints for this cycle, minus the two pins"
        echo "# nova 34 can't meet (oslo.versionedobjects, keystoneauth1)."
        echo "# Regenerate with: install.sh --relock CONSTRAINTS_FILE"
        "$UV" pip freeze --python "$LB_PY" | grep -v "^gt-loopback-fake-port-binding"   # ours, not from PyPI
    } > "$LB_LOCK"
    say "wrote $(grep -vc '^#' "$LB_LOCK") pins to scripts/loopback/requirements.lock"
fi

# `sync` makes the venv exactly the lock (adds, upgrades, removes); it does
# nothing when the venv already matches. Byte-compiling here, in parallel, saves
# the first start from compiling the same modules in a dozen processes at once.
# Our ML2 mechanism driver goes in with the lock: neutron finds mechanism drivers
# by entry point only, so it is a tiny local package (built in an isolated build
# environment: on a new venv the lock's setuptools is not installed yet when uv
# builds it; rebuilt when its source changes).
local_reqs="$LB_STATE/local-requirements.txt"
echo "gt-loopback-fake-port-binding @ file://$LB_HOME/fake_port_binding" > "$local_reqs"
say "uv pip sync requirements.lock + fake_port_binding"
"$UV" pip sync -q --python "$LB_PY" --compile-bytecode "$LB_LOCK" "$local_reqs"

# ---- 4. our fake GPU hypervisor -------------------------------------------------
# nova imports compute_driver as nova.virt.<value>, so the module must sit there.
virt_dir="$("$LB_PY" -c 'import os, nova.virt; print(os.path.dirname(nova.virt.__file__))')"
if ! cmp -s "$LB_HOME/fake_gpu_driver.py" "$virt_dir/fake_gpu_driver.py"; then
    cp "$LB_HOME/fake_gpu_driver.py" "$virt_dir/fake_gpu_driver.py"
    "$LB_PY" -m py_compile "$virt_dir/fake_gpu_driver.py"
    say "fake_gpu_driver.py copied into nova/virt/"
fi

"$LB_PY" - <<'EOF'
from importlib.metadata import version
names = ["keystone", "openstack-placement", "nova", "glance", "cinder", "neutron", "openstack-heat", "openstacksdk", "gunicorn", "PyMySQL"]
print("  " + ", ".join(f"{n} {version(n)}" for n in names))
EOF
say "done ($(du -sh "$LB_VENV" | cut -f1) venv)"

#!/usr/bin/env bash
# Real Blazar beside the loopback OpenStack, for bench/blazar_side_by_side.py only
# (not part of the cloud, not in CI).
#
#   bash scripts/loopback/blazar.sh install      # its own venv: $GT_LOOPBACK_DIR/blazar-venv
#   bash scripts/loopback/blazar.sh start        # db, keystone user + endpoint, config, api + manager
#   bash scripts/loopback/blazar.sh hosts-add    # the GPU hosts into Blazar (its freepool aggregate)
#   bash scripts/loopback/blazar.sh nova-filter on|off  # blazar-nova's BlazarFilter in nova-scheduler, or not
#   bash scripts/loopback/blazar.sh cleanup      # every lease deleted, the hosts out of Blazar, freepool gone
#   bash scripts/loopback/blazar.sh stop         # api and manager stopped by their pids, what Blazar made
#                                                # in Nova and Placement swept, its database dropped, endpoint out
#
# Blazar gets a venv of its own: the running services share the loopback's venv,
# and Blazar's requirements must not move their pins. `hosts-add` changes the
# shared cloud's aggregates (and adds Blazar's reservation providers in
# Placement), so the bench calls it as late as it can and `cleanup` (the
# bench's last step, and `stop`'s first) undoes it. Deleting leases takes Blazar's
# manager about 3 s each (flavor, aggregate, Placement inventory per reservation):
# `stop` does not wait for that, it sweeps what Blazar made (see sweep below).
# `nova-filter on` installs blazar-nova into the cloud's venv with --no-deps (its
# requirements, oslo.*, are there already: no pin moves) and restarts nova-scheduler
# alone, by its pid file, with one more config file adding BlazarFilter; `off`
# restarts it without that file and uninstalls blazar-nova. Nothing else restarts.
# blazar-api (under gunicorn) listens on 127.0.0.1:1234, Blazar's default port.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LB_TAG=blazar

BZ_VENV="$LB_STATE/blazar-venv"
BZ_ETC="$LB_ETC/blazar"
BZ_PORT=1234
BZ_URL="http://$LB_IP:$BZ_PORT"
# Blazar 18 is the 2026.2 release; blazar-nova 10 is its Nova filter, client 4.6 its CLI.
BZ_NOVA=blazar-nova==10.0.0
BZ_PACKAGES=(blazar==18.0.0 "$BZ_NOVA" python-blazarclient==4.6.0 PyMySQL python-openstackclient gunicorn)
BZ_FILTER_CONF="$LB_ETC/nova/blazar-filter.conf"
export UV_CACHE_DIR="${UV_CACHE_DIR:-$LB_STATE/cache/uv}"
export OS_CLIENT_CONFIG_FILE="$LB_CLOUDS"

mysql_cli() { mariadb --defaults-file="$LB_ETC/mysql/my.cnf" "$@"; }
bz() { "$BZ_VENV/bin/$1" "${@:2}"; }

install() {
    [ -x "$LB_TOOLS/bin/uv" ] || die "no uv: run scripts/loopback/install.sh first"
    if [ ! -x "$BZ_VENV/bin/python" ]; then
        "$LB_TOOLS/bin/uv" venv -q --python "$LB_PY" "$BZ_VENV"
    fi
    "$LB_TOOLS/bin/uv" pip install -q --python "$BZ_VENV/bin/python" "${BZ_PACKAGES[@]}"
    say "blazar $("$BZ_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("blazar"))') in $BZ_VENV"
}

configure() {
    mkdir -p "$BZ_ETC" "$LB_LOGS" "$LB_RUN"
    cat > "$BZ_ETC/blazar.conf" <<EOF
[DEFAULT]
host = $LB_IP
port = $BZ_PORT
transport_url = rabbit://guest:guest@$LB_IP:5672/
os_auth_protocol = http
os_auth_host = $LB_IP
os_auth_port = 5000
os_auth_version = v3
os_admin_username = blazar
os_admin_password = blazar
os_admin_project_name = service
os_admin_user_domain_name = Default
os_admin_project_domain_name = Default
os_region_name = RegionOne
use_stderr = true

[api]
auth_strategy = keystone

[database]
connection = mysql+pymysql://openstack:openstack@$LB_IP/blazar?charset=utf8mb4

[manager]
plugins = physical.host.plugin,virtual.instance.plugin,flavor.instance.plugin

[keystone_authtoken]
auth_type = password
auth_url = $LB_KEYSTONE_URL
www_authenticate_uri = $LB_KEYSTONE_URL
user_domain_name = Default
project_domain_name = Default
project_name = service
username = blazar
password = blazar
region_name = RegionOne

[nova]
aggregate_freepool_name = freepool
endpoint_type = public

[placement]
endpoint_type = public

[oslo_policy]
enforce_scope = False
enforce_new_defaults = False

[oslo_messaging_notifications]
driver = noop
EOF
}

identity() {
    # the service user and the `reservation` endpoint, as bootstrap.py makes the others
    "$LB_PY" - "$BZ_URL" <<'EOF'
import sys
import openstack
conn = openstack.connect(cloud="gt-admin")
idn = conn.identity
service = idn.find_project("service", domain_id="default", ignore_missing=False)
user = idn.find_user("blazar", domain_id="default") or idn.create_user(
    name="blazar", password="blazar", domain_id="default", default_project_id=service.id)
for role in ("admin", "service"):
    idn.assign_project_role_to_user(service, user, idn.find_role(role, ignore_missing=False))
svc = next(iter(idn.services(name="blazar")), None) or idn.create_service(
    name="blazar", type="reservation", is_enabled=True)
url = sys.argv[1] + "/v1"
have = {ep.interface: ep for ep in idn.endpoints(service_id=svc.id)}
for interface in ("public", "internal", "admin"):
    if interface not in have:
        idn.create_endpoint(service_id=svc.id, interface=interface, url=url, region_id="RegionOne")
    elif have[interface].url != url:
        idn.update_endpoint(have[interface], url=url)
print(f"[blazar] user blazar (admin, service); reservation endpoint {url}")
EOF
}

start() {
    [ -x "$BZ_VENV/bin/blazar-api" ] || die "no Blazar venv: run $0 install first"
    for name in blazar-api blazar-manager; do
        if [ -f "$LB_RUN/$name.pid" ] && kill -0 "$(cat "$LB_RUN/$name.pid")" 2>/dev/null; then
            die "$name is running already (pid $(cat "$LB_RUN/$name.pid"))"
        fi
    done
    configure
    mysql_cli -e "CREATE DATABASE IF NOT EXISTS blazar"
    bz blazar-db-manage --config-file "$BZ_ETC/blazar.conf" upgrade head > "$LB_LOGS/setup-blazar.log" 2>&1 \
        || die "blazar-db-manage failed; see $LB_LOGS/setup-blazar.log"
    identity
    launch blazar-manager "$BZ_VENV/bin/blazar-manager" --config-file "$BZ_ETC/blazar.conf"
    # Blazar 18's blazar-api command serves from a daemon thread and returns at
    # once (the process exits), so its WSGI app runs under gunicorn instead
    launch blazar-api env OS_BLAZAR_CONFIG_DIR="$BZ_ETC" "$BZ_VENV/bin/gunicorn" --no-control-socket \
        --bind "$LB_IP:$BZ_PORT" --workers 1 --threads 8 --timeout 120 --graceful-timeout 5 --keep-alive 30 \
        --error-logfile - "blazar.api.wsgi_app:init_app()"
    local i
    for ((i = 0; i < 300; i++)); do
        curl -s -o /dev/null --max-time 2 "$BZ_URL/" && break
        sleep 0.2
    done
    curl -s -o /dev/null --max-time 2 "$BZ_URL/" || die "blazar-api does not answer on $BZ_URL; see $LB_LOGS/blazar-api.log"
    say "blazar-api pid $(cat "$LB_RUN/blazar-api.pid") on $BZ_URL, blazar-manager pid $(cat "$LB_RUN/blazar-manager.pid")"
}

# The `gt-admin` cloud's credentials for blazarclient (OSC plugin in Blazar's venv)
osc() { bz openstack --os-cloud gt-admin "$@"; }

hosts_add() {
    local spec host count product tries
    # Blazar looks its freepool aggregate up by name and never makes it
    "$LB_PY" -c 'import openstack; c = openstack.connect(cloud="gt-admin")
c.compute.find_aggregate("freepool") or c.compute.create_aggregate(name="freepool")'
    for spec in $LB_COMPUTES; do
        IFS=: read -r host count product <<< "$spec"
        if osc reservation host show "$host" >/dev/null 2>&1; then continue; fi
        # Blazar refuses a host with servers on it; others' tests come and go
        for ((tries = 0; tries < 60; tries++)); do
            osc reservation host create "$host" >/dev/null 2>"$LB_LOGS/blazar-host-create.err" && break
            grep -q "HostHavingServers\|has servers\|servers" "$LB_LOGS/blazar-host-create.err" \
                || die "host create $host: $(cat "$LB_LOGS/blazar-host-create.err")"
            sleep 2
        done
        osc reservation host show "$host" >/dev/null 2>&1 || die "host create $host: $(cat "$LB_LOGS/blazar-host-create.err")"
        say "host $host is in Blazar (freepool)"
    done
}

# Everything Blazar added to the shared cloud goes: leases (their flavors,
# aggregates and Placement inventory), hosts (freepool membership, reservation
# providers), then the freepool aggregate itself.
cleanup() {
    # through the REST API in one process: an `openstack` command per lease takes seconds to start
    "$LB_PY" - "$BZ_URL" <<'EOF'
import concurrent.futures as cf
import sys
import time
import openstack
conn = openstack.connect(cloud="gt-admin")
sess, url = conn.session, sys.argv[1] + "/v1"
try:
    sess.get(url + "/leases", timeout=10)
    up = True
except Exception:
    up = False
if up:
    leases = sess.get(url + "/leases").json()["leases"]
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda lz: sess.delete(f"{url}/leases/{lz['id']}", raise_exc=False), leases))
    deadline = time.time() + 1800   # the manager ends them one by one (flavor, aggregate, Placement)
    while sess.get(url + "/leases").json()["leases"] and time.time() < deadline:
        time.sleep(5)
    left = sess.get(url + "/leases").json()["leases"]
    if left:
        sys.exit(f"[blazar] {len(left)} leases still there; hosts stay in Blazar")
    for host in sess.get(url + "/os-hosts").json()["hosts"]:
        sess.delete(f"{url}/os-hosts/{host['id']}")
    print(f"[blazar] {len(leases)} leases deleted; hosts out of Blazar")
agg = conn.compute.find_aggregate("freepool")
if agg is not None:
    for host in agg.hosts or []:
        conn.compute.remove_host_from_aggregate(agg, host)
    conn.compute.delete_aggregate(agg)
print("[blazar] freepool aggregate gone")
EOF
}

# nova-scheduler again, as start.sh launches it, with config files added ($@); waits for it to serve
restart_scheduler() {
    local log="$LB_LOGS/nova-scheduler.log" from i
    stop_group nova-scheduler
    from=$(($(wc -l < "$log") + 1))
    launch nova-scheduler "$LB_VENV/bin/nova-scheduler" --config-file "$LB_ETC/nova/nova.conf" "$@"
    for ((i = 0; i < 600; i++)); do
        tail -n "+$from" "$log" | grep -q "Starting scheduler node" && break
        kill -0 "$(cat "$LB_RUN/nova-scheduler.pid")" 2>/dev/null || die "nova-scheduler died; see $log"
        sleep 0.2
    done
    tail -n "+$from" "$log" | grep -q "Starting scheduler node" || die "nova-scheduler did not start; see $log"
    say "nova-scheduler pid $(cat "$LB_RUN/nova-scheduler.pid")${*:+ with $*}"
}

nova_filter() {
    local filters
    case "${1:-}" in
        on)
            "$LB_TOOLS/bin/uv" pip install -q --no-deps --python "$LB_PY" "$BZ_NOVA"
            "$LB_PY" -c "import blazarnova.scheduler.filters.blazar_filter" || die "blazarnova does not import"
            filters=$(sed -n 's/^enabled_filters *= *//p' "$LB_ETC/nova/nova.conf" | head -n 1)
            [ -n "$filters" ] || die "no enabled_filters in $LB_ETC/nova/nova.conf"
            cat > "$BZ_FILTER_CONF" <<EOF
[filter_scheduler]
available_filters = nova.scheduler.filters.all_filters
available_filters = blazarnova.scheduler.filters.blazar_filter.BlazarFilter
enabled_filters = $filters,BlazarFilter
EOF
            restart_scheduler --config-file "$BZ_FILTER_CONF" ;;
        off)
            rm -f "$BZ_FILTER_CONF"
            restart_scheduler
            "$LB_TOOLS/bin/uv" pip uninstall -q --python "$LB_PY" blazar-nova 2>/dev/null || true ;;
        *) die "usage: $0 nova-filter on|off" ;;
    esac
}

# What Blazar made in the shared cloud, removed without it (its manager stopped): servers booted
# with its reservation flavors, those flavors (reservation:<id>), its aggregates (metadata
# `reservation`, and the freepool), its Placement providers blazar_<host> and classes
# CUSTOM_RESERVATION_*. Deleting 200 leases through Blazar would take its manager 10 minutes.
sweep() {
    "$LB_PY" - <<'EOF'
import concurrent.futures as cf
import sys
import time
import openstack
conn = openstack.connect(cloud="gt-admin")
nova, placement = conn.compute, conn.placement
pool = cf.ThreadPoolExecutor(8)   # a few hundred calls each
flavors = [f.id for f in nova.flavors(is_public=None) if f.name.startswith("reservation:")]
servers = [s for s in nova.servers(details=True, all_projects=True)
           if (getattr(s.flavor, "original_name", None) or "").startswith("reservation:")]
list(pool.map(lambda s: nova.delete_server(s, ignore_missing=True), servers))
deadline = time.time() + 300
while servers and time.time() < deadline:
    time.sleep(2)
    servers = [s for s in servers if nova.find_server(s.id, ignore_missing=True, all_projects=True)]
if servers:
    sys.exit(f"[blazar] {len(servers)} servers of Blazar's flavors are still there")
list(pool.map(lambda f: nova.delete_flavor(f, ignore_missing=True), flavors))
aggs = [a for a in nova.aggregates() if "reservation" in (a.metadata or {}) or a.name == "freepool"]
def drop(agg):
    for host in agg.hosts or []:
        # one host's aggregates one at a time: Nova mirrors each change into the host's
        # Placement provider, and two at once conflict on its generation (409)
        for attempt in range(5):
            try:
                nova.remove_host_from_aggregate(agg, host)
                break
            except openstack.exceptions.ConflictException:
                time.sleep(1 + attempt)
    nova.delete_aggregate(agg)
for agg in aggs:
    drop(agg)
providers = [rp for rp in placement.resource_providers() if rp.name.startswith("blazar_")]
for rp in providers:
    placement.delete_resource_provider(rp)
classes = [rc.name for rc in placement.resource_classes() if rc.name.startswith("CUSTOM_RESERVATION_")]
list(pool.map(lambda name: placement.delete("/resource_classes/" + name, microversion="1.7"), classes))
print(f"[blazar] swept {len(flavors)} flavors, {len(aggs)} aggregates, {len(providers)} Placement providers, "
      f"{len(classes)} resource classes")
EOF
}

stop() {
    local swept=1
    stop_group blazar-api blazar-manager
    sweep || swept=0
    # its database goes only once what it made is gone (a second `stop` sweeps again)
    if [ $swept = 1 ]; then mysql_cli -e "DROP DATABASE IF EXISTS blazar"; fi
    # the catalog's `reservation` entry too: nothing answers there now, and gpu-tenancy's own
    # Blazar-compatible endpoint may be registered under that type
    "$LB_PY" -c 'import openstack; idn = openstack.connect(cloud="gt-admin").identity
for svc in idn.services(name="blazar"):
    for ep in idn.endpoints(service_id=svc.id):
        idn.delete_endpoint(ep)
    idn.delete_service(svc)
print("[blazar] reservation endpoint out of the catalog")'
    [ $swept = 1 ] || die "the sweep left some of what Blazar made: run $0 stop again"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    hosts-add) hosts_add ;;
    nova-filter) nova_filter "${2:-}" ;;
    cleanup) cleanup ;;
    stop) stop ;;
    *) die "usage: $0 install|start|hosts-add|nova-filter on|off|cleanup|stop" ;;
esac

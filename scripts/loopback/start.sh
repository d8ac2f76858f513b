#!/usr/bin/env bash
# Start the loopback OpenStack: every process on 127.0.0.1, every pid in run/.
#
#   bash scripts/loopback/start.sh
#
# The first start (no database yet) also creates the databases and schemas,
# keystone's keys and admin, and runs bootstrap.py. Later starts only start the
# processes. Either way the script returns once the cloud takes GPU boots
# (wait_ready.py), and prints how long each part took.
#
#   MariaDB 3306 · RabbitMQ 5672 (epmd 4369, dist 25672) · Keystone 5000 ·
#   Placement 8778 · Glance 9292 · Nova 8774 · Cinder 8776 · Neutron 9696 · Heat 8004
#   (heat-api and one heat-engine)
#   nova-compute x3: gpu-a100-1 (4 A100), gpu-a100-2 (4 A100), gpu-h100-1 (2 H100)
#
# Stop with stop.sh. Run install.sh first.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LB_TAG=start
BIN="$LB_VENV/bin"
PORTS="3306 5672 4369 25672 5000 8778 8774 9292 8776 9696 8004"

bash "$LB_HOME/configure.sh"

# ---- refuse to start twice, or onto ports someone else holds ------------------------
for f in "$LB_RUN"/*.pid; do
    [ -e "$f" ] || continue
    pid="$(cat "$f")"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        die "$(basename "$f" .pid) is still running (pid $pid): run stop.sh first"
    fi
done
rm -f "$LB_RUN"/*.pid
for port in $PORTS; do
    if (exec 3<>"/dev/tcp/$LB_IP/$port") 2>/dev/null; then
        die "port $port on $LB_IP is taken by a process that isn't ours"
    fi
done

# ---- helpers ------------------------------------------------------------------------
# On failure, whatever was started keeps running (and its logs stay) until stop.sh.
trap 'rc=$?; [ $rc = 0 ] || say "start failed (exit $rc); logs: $LB_LOGS; stop what did start with: bash $LB_HOME/stop.sh"' EXIT
export OS_CLIENT_CONFIG_FILE="$LB_CLOUDS"

# api NAME PORT FACTORY: a gunicorn server for one WSGI app of wsgi_apps.py. Idle
# connections are kept 30 s, not gunicorn's 2: a client reusing one just as the server
# closes it gets no answer ("Connection reset by peer"), and with 2 s that struck a test
# now and then (the service retries reads so dropped; a write or a test's own call it cannot).
api() {
    local name=$1 port=$2 factory=$3
    launch "$name" env GT_LB_ETC="$LB_ETC" "$BIN/gunicorn" \
        --no-control-socket --chdir "$LB_HOME" --bind "$LB_IP:$port" \
        --workers 1 --threads 4 --timeout 120 --graceful-timeout 5 --keep-alive 30 \
        --access-logfile - --error-logfile - "wsgi_apps:$factory()"
}

# wait_port PORT [SECONDS]
wait_port() {
    local port=$1 limit=$(( ${2:-120} * 5 )) i
    for ((i = 0; i < limit; i++)); do
        (exec 3<>"/dev/tcp/$LB_IP/$port") 2>/dev/null && return 0
        sleep 0.2
    done
    die "nothing answers on port $port; see $LB_LOGS"
}

# wait_http URL [SECONDS]: any HTTP answer will do (401 included)
wait_http() {
    local url=$1 limit=$(( ${2:-120} * 5 )) i
    for ((i = 0; i < limit; i++)); do
        curl -s -o /dev/null --max-time 5 "$url" && return 0
        sleep 0.2
    done
    die "no answer from $url; see $LB_LOGS"
}

declare -A SETUP_PID=()
# setup NAME FUNCTION: a first-run step in the background, output to logs/setup-NAME.log
setup() { "$2" > "$LB_LOGS/setup-$1.log" 2>&1 & SETUP_PID[$1]=$!; }
# setup_done NAME: wait for that step (a no-op on a warm start)
setup_done() {
    local pid=${SETUP_PID[$1]:-}
    [ -n "$pid" ] || return 0
    wait "$pid" || die "setup of $1 failed; see $LB_LOGS/setup-$1.log"
    say "$1 schema ready"
}

mysql_cli() { mariadb --defaults-file="$LB_ETC/mysql/my.cnf" "$@"; }

# ---- first-run steps (each can be re-run) ---------------------------------------------
KM=("$BIN/keystone-manage" --config-file "$LB_ETC/keystone/keystone.conf")
NM=("$BIN/nova-manage" --config-file "$LB_ETC/nova/nova.conf")

setup_keystone() {
    "${KM[@]}" db_sync
    "${KM[@]}" fernet_setup --keystone-user root --keystone-group root
    "${KM[@]}" credential_setup --keystone-user root --keystone-group root
    "${KM[@]}" bootstrap --bootstrap-username admin --bootstrap-password admin \
        --bootstrap-project-name admin --bootstrap-role-name admin \
        --bootstrap-service-name keystone --bootstrap-region-id RegionOne \
        --bootstrap-admin-url "$LB_KEYSTONE_URL" --bootstrap-internal-url "$LB_KEYSTONE_URL" \
        --bootstrap-public-url "$LB_KEYSTONE_URL"
}
setup_nova() {
    "${NM[@]}" api_db sync
    "${NM[@]}" cell_v2 map_cell0 \
        --database_connection "mysql+pymysql://openstack:openstack@$LB_IP/nova_cell0?charset=utf8mb4"
    "${NM[@]}" cell_v2 list_cells | grep -q ' cell1 ' || "${NM[@]}" cell_v2 create_cell --name cell1
    "${NM[@]}" db sync    # cell1, and cell0 too
}
setup_placement() { "$BIN/placement-manage" --config-file "$LB_ETC/placement/placement.conf" db sync; }
setup_glance() { "$BIN/glance-manage" --config-file "$LB_ETC/glance/glance-api.conf" db_sync; }
setup_cinder() { "$BIN/cinder-manage" --config-file "$LB_ETC/cinder/cinder.conf" db sync; }
setup_heat() { "$BIN/heat-manage" --config-file "$LB_ETC/heat/heat.conf" db_sync; }
setup_neutron() {
    "$BIN/neutron-db-manage" --config-file "$LB_ETC/neutron/neutron.conf" \
        --config-file "$LB_ETC/neutron/plugins/ml2/ml2_conf.ini" upgrade heads
}

SETUP_MARK="$LB_DATA/.setup-done"          # schemas + keystone bootstrap + bootstrap.py identity
RESOURCES_MARK="$LB_DATA/.resources-done"  # bootstrap.py resources networks
# Heat came after the others: a state dir made before it has SETUP_MARK but no
# heat database, so Heat's first-run steps have their own mark.
HEAT_MARK="$LB_DATA/.heat-done"            # heat DB + schema, bootstrap.py identity with Heat's entries

# ---- 1. MariaDB, RabbitMQ (+ its epmd) -----------------------------------------------
first_run=0 heat_new=0
[ -e "$SETUP_MARK" ] || first_run=1
[ -e "$HEAT_MARK" ] || heat_new=1
if [ ! -d "$LB_DATA/mysql/mysql" ]; then
    say "first run: initialising MariaDB in $LB_DATA/mysql"
    rm -rf "$LB_DATA/mysql"
    mariadb-install-db --defaults-file="$LB_ETC/mysql/my.cnf" --auth-root-authentication-method=normal \
        --skip-test-db > "$LB_LOGS/setup-mariadb.log" 2>&1 || die "mariadb-install-db failed; see $LB_LOGS/setup-mariadb.log"
fi
launch mariadb mariadbd --defaults-file="$LB_ETC/mysql/my.cnf"

(
    set -a
    # shellcheck disable=SC1091
    . "$LB_ETC/rabbitmq/env"
    set +a
    mkdir -p "$HOME" "$RABBITMQ_LOG_BASE"
    launch epmd epmd -address "$LB_IP" -port 4369
    wait_port 4369 10
    launch rabbitmq /usr/lib/rabbitmq/bin/rabbitmq-server
)

for ((i = 0; i < 150; i++)); do mariadb-admin --defaults-file="$LB_ETC/mysql/my.cnf" ping >/dev/null 2>&1 && break; sleep 0.2; done
mariadb-admin --defaults-file="$LB_ETC/mysql/my.cnf" ping >/dev/null 2>&1 || die "MariaDB did not start; see $LB_LOGS/mysqld.log"
say "MariaDB up"

if [ $first_run = 1 ]; then
    say "first run: databases, then all schema syncs in parallel"
    mysql_cli <<'EOF'
CREATE USER IF NOT EXISTS 'openstack'@'127.0.0.1' IDENTIFIED BY 'openstack';
CREATE USER IF NOT EXISTS 'openstack'@'localhost' IDENTIFIED BY 'openstack';
GRANT ALL PRIVILEGES ON *.* TO 'openstack'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'openstack'@'localhost';
CREATE DATABASE IF NOT EXISTS keystone;
CREATE DATABASE IF NOT EXISTS placement;
CREATE DATABASE IF NOT EXISTS glance;
CREATE DATABASE IF NOT EXISTS cinder;
CREATE DATABASE IF NOT EXISTS nova_api;
CREATE DATABASE IF NOT EXISTS nova_cell0;
CREATE DATABASE IF NOT EXISTS nova_cell1;
CREATE DATABASE IF NOT EXISTS neutron;
FLUSH PRIVILEGES;
EOF
    setup keystone setup_keystone
    setup nova setup_nova
    setup placement setup_placement
    setup glance setup_glance
    setup cinder setup_cinder
    setup neutron setup_neutron
fi
if [ $heat_new = 1 ]; then
    [ $first_run = 1 ] || say "Heat is new to this state dir: its database, schema and Keystone entries"
    mysql_cli -e "CREATE DATABASE IF NOT EXISTS heat"
    setup heat setup_heat
fi

# ---- 2. Keystone, then the users and catalog everything else logs in with ----------
setup_done keystone
api keystone 5000 keystone
wait_http "$LB_KEYSTONE_URL"
say "Keystone up"
if [ $first_run = 1 ] || [ $heat_new = 1 ]; then
    "$LB_PY" "$LB_HOME/bootstrap.py" identity > "$LB_LOGS/setup-bootstrap.log" 2>&1 \
        || die "bootstrap.py identity failed; see $LB_LOGS/setup-bootstrap.log"
    say "users, projects, roles and catalog created"
fi
wait_port 5672 60
say "RabbitMQ up"

# ---- 3. the other services, each once its schema is there ----------------------------
setup_done placement
api placement 8778 placement
setup_done glance
api glance 9292 glance
setup_done cinder
api cinder-api 8776 cinder_api
launch cinder-scheduler "$BIN/cinder-scheduler" --config-file "$LB_ETC/cinder/cinder.conf"
launch cinder-volume "$BIN/cinder-volume" --config-file "$LB_ETC/cinder/cinder.conf"
setup_done neutron
api neutron-api 9696 neutron
setup_done nova
if [ $first_run = 1 ]; then touch "$SETUP_MARK"; fi
since=$(date +%s)
api nova-api 8774 nova_api
launch nova-conductor "$BIN/nova-conductor" --config-file "$LB_ETC/nova/nova.conf"
launch nova-scheduler "$BIN/nova-scheduler" --config-file "$LB_ETC/nova/nova.conf"
# a compute that can't reach placement at start waits a whole periodic interval
wait_http "http://$LB_IP:8778/"
hosts="" gpus=0
for spec in $LB_COMPUTES; do
    IFS=: read -r host count _ <<< "$spec"
    hosts="$hosts $host" gpus=$((gpus + count))
    launch_compute "$host"
done
setup_done heat
if [ $heat_new = 1 ]; then touch "$HEAT_MARK"; fi
api heat-api 8004 heat_api
# heat_engine.py: heat-engine without its forking master (one process, not two)
launch heat-engine "$LB_PY" "$LB_HOME/heat_engine.py" --config-file "$LB_ETC/heat/heat.conf"
say "all processes started"

wait_http "http://$LB_IP:9292/"
wait_http "http://$LB_IP:8776/"
wait_http "http://$LB_IP:8774/"
wait_http "http://$LB_IP:9696/"
wait_http "http://$LB_IP:8004/"
say "all APIs answer"

if [ ! -e "$RESOURCES_MARK" ]; then
    "$LB_PY" "$LB_HOME/bootstrap.py" resources networks >> "$LB_LOGS/setup-bootstrap.log" 2>&1 \
        || die "bootstrap.py resources networks failed; see $LB_LOGS/setup-bootstrap.log"
    touch "$RESOURCES_MARK"
    say "quotas raised, image ubuntu-22.04 uploaded, networks made"
fi

# ---- 4. ready for GPU boots ----------------------------------------------------------
"$LB_PY" "$LB_HOME/wait_ready.py" --since "$since" --hosts "$hosts" --gpus "$gpus" \
    --nova-conf "$LB_ETC/nova/nova.conf" || die "the stack did not get ready; see $LB_LOGS"

# every start: the hosts must be in Nova's cell and Placement first (wait_ready)
"$LB_PY" "$LB_HOME/bootstrap.py" isolation >> "$LB_LOGS/setup-bootstrap.log" 2>&1 \
    || die "bootstrap.py isolation failed; see $LB_LOGS/setup-bootstrap.log"
say "GPU hosts isolated: flavors must require the trait CUSTOM_GPU_TENANCY"

rss_kb=0
for f in "$LB_RUN"/*.pid; do
    for p in $(tree_pids "$(cat "$f")"); do
        rss_kb=$(( rss_kb + $(ps -o rss= -p "$p" 2>/dev/null || echo 0) ))
    done
done
say "READY ($([ $first_run = 1 ] && echo first || echo warm) start, $(elapsed) s, $((rss_kb / 1024)) MB RSS)"
say "clouds.yaml: $LB_CLOUDS (gt-admin, gt-service, gt-alice, gt-bob, gt-rita)"

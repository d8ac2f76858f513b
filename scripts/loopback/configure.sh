#!/usr/bin/env bash
# Write every config file of the loopback stack under $GT_LOOPBACK_DIR/etc, and
# clouds.yaml beside it. start.sh runs this on every start; the files are
# generated, so edit this script rather than them.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ -x "$LB_PY" ] || die "no venv at $LB_VENV: run scripts/loopback/install.sh first"

E="$LB_ETC" D="$LB_DATA"
mkdir -p "$E"/{mysql,rabbitmq,keystone,placement,glance,nova,nova-compute,cinder,neutron/plugins/ml2,heat} \
         "$D"/{glance/images,glance/staging,glance/tasks,nova/control,cinder/locks,neutron/locks,heat/locks,rabbitmq/home} \
         "$LB_LOGS" "$LB_RUN"

DB="mysql+pymysql://openstack:openstack@$LB_IP"
DB_OPTS="charset=utf8mb4"
AMQP="rabbit://guest:guest@$LB_IP:5672/"
PKG_ETC="$LB_VENV/etc"

# keystone_credentials SECTION USER: password auth of a service user (password = name)
keystone_credentials() {
    cat <<EOF
[$1]
auth_type = password
auth_url = $LB_KEYSTONE_URL
user_domain_name = Default
project_domain_name = Default
project_name = service
username = $2
password = $2
region_name = RegionOne
EOF
}

# authtoken USER: keystonemiddleware in front of an API; the service user validates tokens
authtoken() {
    keystone_credentials keystone_authtoken "$1"
    echo "www_authenticate_uri = $LB_KEYSTONE_URL"
}

# Legacy policy defaults everywhere: the admin role in any project is admin, and
# project-scoped tokens do for everything.
policy() {
    printf '[oslo_policy]\nenforce_scope = False\nenforce_new_defaults = False\n'
}

# ---- MariaDB: one server, one database per service ------------------------------
# Durability is traded for speed (a test stack): no doublewrite, lazy log
# flushing, one shared tablespace so the ~300 CREATE TABLEs of the schema syncs
# don't each create and fsync a file.
cat > "$E/mysql/my.cnf" <<EOF
[mysqld]
user = root
bind-address = $LB_IP
port = 3306
datadir = $D/mysql
socket = $LB_RUN/mysqld.sock
pid-file = $LB_RUN/mariadbd.own-pid
log-error = $LB_LOGS/mysqld.log
skip-name-resolve
max_connections = 1000
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
innodb_buffer_pool_size = 128M
innodb_log_file_size = 32M
innodb_file_per_table = 0
innodb_doublewrite = 0
innodb_flush_log_at_trx_commit = 0
[client]
socket = $LB_RUN/mysqld.sock
user = root
EOF

# ---- RabbitMQ: own node name, own epmd, loopback only -----------------------------
cat > "$E/rabbitmq/rabbitmq.conf" <<EOF
listeners.tcp.1 = $LB_IP:5672
loopback_users.guest = true
disk_free_limit.absolute = 50MB
vm_memory_high_watermark.relative = 0.2
EOF
echo '[].' > "$E/rabbitmq/enabled_plugins"
cat > "$E/rabbitmq/env" <<EOF
HOME=$D/rabbitmq/home
RABBITMQ_NODENAME=gt-loopback@localhost
RABBITMQ_NODE_IP_ADDRESS=$LB_IP
RABBITMQ_NODE_PORT=5672
RABBITMQ_DIST_PORT=25672
RABBITMQ_CONFIG_FILE=$E/rabbitmq/rabbitmq.conf
RABBITMQ_ENABLED_PLUGINS_FILE=$E/rabbitmq/enabled_plugins
RABBITMQ_MNESIA_BASE=$D/rabbitmq/mnesia
RABBITMQ_LOG_BASE=$LB_LOGS/rabbitmq
RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
RABBITMQ_CTL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
ERL_EPMD_ADDRESS=$LB_IP
ERL_EPMD_PORT=4369
EOF

# ---- Keystone :5000 -----------------------------------------------------------------
cat > "$E/keystone/keystone.conf" <<EOF
[DEFAULT]
debug = False
[database]
connection = $DB/keystone?$DB_OPTS
[identity]
# bcrypt's minimum cost: every password check is CPU time on a 2-core box
password_hash_rounds = 4
[token]
provider = fernet
[fernet_tokens]
key_repository = $D/keystone/fernet-keys
[fernet_receipts]
key_repository = $D/keystone/fernet-receipts
[credential]
key_repository = $D/keystone/credential-keys
$(policy)
EOF

# ---- Placement :8778 -------------------------------------------------------------------
cat > "$E/placement/placement.conf" <<EOF
[DEFAULT]
debug = False
[api]
auth_strategy = keystone
[placement_database]
connection = $DB/placement?$DB_OPTS
[placement]
# Placement retries a write that lost a provider generation race inside the same
# database transaction, whose REPEATABLE READ snapshot predates the winner's
# commit: its capacity check then sees the old usage, and a last unit goes
# twice (20 racing claims for a total of 1: two or three 204s in one try of
# three). Without the server-side retry the loser gets 409 and its client
# (nova's scheduler) tries again in a fresh transaction.
allocation_conflict_retry_count = 1
$(authtoken placement)
$(policy)
EOF

# ---- Glance :9292, images on the local file system ---------------------------------
cp "$PKG_ETC/glance/glance-api-paste.ini" "$E/glance/"
cat > "$E/glance/glance-api.conf" <<EOF
[DEFAULT]
debug = False
enabled_backends = local:file
worker_self_reference_url = http://$LB_IP:9292
[database]
connection = $DB/glance?$DB_OPTS
[glance_store]
default_backend = local
[local]
filesystem_store_datadir = $D/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $D/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $D/glance/tasks
[paste_deploy]
flavor = keystone
config_file = $E/glance/glance-api-paste.ini
$(authtoken glance)
$(policy)
EOF

# ---- Nova :8774 + conductor, scheduler, one nova-compute per fake host ------------
# nova.conf is read by every nova process. Each compute adds a second file,
# nova-compute/<host>.conf, with what must differ per host.
pci_lines() {
    local rc=$1 product=$2 alias=$3
    echo "device_spec = {\"vendor_id\": \"10de\", \"product_id\": \"$product\", \"resource_class\": \"$rc\"}"
    echo "alias = {\"name\": \"$alias\", \"vendor_id\": \"10de\", \"product_id\": \"$product\", \"device_type\": \"type-PCI\", \"resource_class\": \"$rc\"}"
}
cp "$PKG_ETC/nova/api-paste.ini" "$E/nova/"
cat > "$E/nova/nova.conf" <<EOF
[DEFAULT]
debug = False
host = gt-control
my_ip = $LB_IP
transport_url = $AMQP
state_path = $D/nova/control
# scripts/loopback/fake_gpu_driver.py, copied into nova/virt/ by install.sh
compute_driver = fake_gpu_driver.FakeGpuDriver
# heartbeats every 5 s; a host without one for 20 s is "down" (nova: 10 / 60)
report_interval = 5
service_down_time = 20
# periodic tasks start right away instead of after up to 60 s of random delay
periodic_fuzzy_delay = 0
heal_instance_info_cache_interval = -1
graceful_shutdown_timeout = 5
# No agent plugs a port, so none sends network-vif-plugged: boot without waiting.
# (The fake hypervisor doesn't wait for it anyway; live migration would.)
vif_plugging_is_fatal = False
vif_plugging_timeout = 0
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = $E/nova/api-paste.ini
[api_database]
connection = $DB/nova_api?$DB_OPTS
[database]
connection = $DB/nova_cell1?$DB_OPTS
$(authtoken nova)
$(keystone_credentials placement nova)
$(keystone_credentials neutron nova)
$(keystone_credentials cinder nova)
# Nova must prove to Cinder that a detach comes from nova (a service token with
# the 'service' role); otherwise Cinder answers 409 ConflictNovaUsingAttachment
# and the volume stays 'detaching'.
$(keystone_credentials service_user nova)
send_service_user_token = True
[glance]
region_name = RegionOne
[conductor]
workers = 1
[scheduler]
# one scheduler: two would race for the same GPU provider on concurrent boots
workers = 1
discover_hosts_in_cells_interval = 2
# The GPU hosts' aggregates require a trait (bootstrap.py isolation): a flavor
# that does not require it (anything but a lease's own flavor) lands elsewhere.
enable_isolated_aggregate_filtering = True
[filter_scheduler]
enabled_filters = ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,PciPassthroughFilter
pci_in_placement = True
[pci]
# every GPU becomes a child resource provider of its host in placement
report_in_placement = True
$(pci_lines CUSTOM_PGPU_A100 20b5 a100)
$(pci_lines CUSTOM_PGPU_H100 2330 h100)
[oslo_concurrency]
lock_path = $D/nova/control/locks
[vnc]
enabled = False
$(policy)
EOF

for spec in $LB_COMPUTES; do
    IFS=: read -r host _count _product <<< "$spec"
    hd="$D/nova/$host"
    mkdir -p "$hd/instances" "$hd/locks"
    # state_path holds this host's compute_id (its node UUID). It must not be a
    # config folder: nova also looks for compute_id beside every config file.
    cat > "$E/nova-compute/$host.conf" <<EOF
[DEFAULT]
host = $host
state_path = $hd
instances_path = $hd/instances
[oslo_concurrency]
lock_path = $hd/locks
EOF
done

# ---- Neutron :9696, ML2 with our mechanism driver, no agents -------------------------
# neutron-api (gunicorn) is the only neutron process. Ports get fixed IPs from
# neutron's own IPAM and are bound by fake_port_binding (every host, ACTIVE at
# once). Routers and floating IPs exist in the DB only: no L3 agent forwards
# anything, and no DHCP agent serves the subnets.
# api-paste.ini is found beside neutron.conf
cp "$PKG_ETC/neutron/api-paste.ini" "$E/neutron/"
cat > "$E/neutron/neutron.conf" <<EOF
[DEFAULT]
debug = False
host = gt-neutron
transport_url = $AMQP
auth_strategy = keystone
state_path = $D/neutron
core_plugin = ml2
# router: routers and floating IPs (the API; nothing forwards packets)
service_plugins = router
# no DHCP agent listens: don't send it casts nobody reads
dhcp_agent_notification = False
# port up/down and address changes go to nova as external events, so the
# servers' addresses show floating IPs as soon as they are associated
notify_nova_on_port_status_changes = True
notify_nova_on_port_data_changes = True
[database]
connection = $DB/neutron?$DB_OPTS
$(authtoken neutron)
$(keystone_credentials nova neutron)
[oslo_concurrency]
lock_path = $D/neutron/locks
$(policy)
EOF
# tenant networks are VXLAN (any VNI will do: nothing is encapsulated); the
# external network is flat on physnet "public"
cat > "$E/neutron/plugins/ml2/ml2_conf.ini" <<EOF
[ml2]
type_drivers = flat,vxlan
project_network_types = vxlan
mechanism_drivers = gt_fake_host
extension_drivers = port_security
[ml2_type_flat]
flat_networks = public
[ml2_type_vxlan]
vni_ranges = 1:1000
[securitygroup]
enable_security_group = True
EOF

# ---- Cinder :8776, a volume backend that only logs ------------------------------------
cp "$PKG_ETC/cinder/api-paste.ini" "$E/cinder/"
cat > "$E/cinder/cinder.conf" <<EOF
[DEFAULT]
debug = False
host = gt-cinder
my_ip = $LB_IP
transport_url = $AMQP
auth_strategy = keystone
api_paste_config = $E/cinder/api-paste.ini
state_path = $D/cinder
osapi_volume_listen = $LB_IP
enabled_backends = fake
graceful_shutdown_timeout = 5
# cinder-volume tells the scheduler its capacity every 10 s (default 60, with a
# first report up to 60 s late); until then every volume create fails with
# "No valid backend was found"
backend_stats_polling_interval = 10
periodic_interval = 10
periodic_fuzzy_delay = 0
[fake]
# ships with cinder (cinder/tests/fake_driver.py): volumes exist only in the DB
volume_driver = cinder.tests.fake_driver.FakeLoggingVolumeDriver
volume_backend_name = fake
[database]
connection = $DB/cinder?$DB_OPTS
$(authtoken cinder)
[oslo_concurrency]
lock_path = $D/cinder/locks
[coordination]
backend_url = file://$D/cinder
$(policy)
EOF

# ---- Heat :8004 (heat-api) + one heat-engine --------------------------------------------
# heat-api under gunicorn (wsgi_apps.heat_api). No heat-api-cfn runs: its URLs
# below only go into a server's user data (HEAT_CFNTOOLS, the default
# user_data_format, and wait conditions), which the fake VMs never run; without
# them such a server fails at create (no "cloudformation" endpoint).
# Stack users (wait conditions, software deployments, signals) live in their own
# Keystone domain "heat", run by heat_domain_admin (bootstrap.py identity makes both).
[ -d "$PKG_ETC/heat" ] || die "no Heat in $LB_VENV (a venv from before Heat): run scripts/loopback/install.sh"
cp "$PKG_ETC/heat/api-paste.ini" "$E/heat/"
mkdir -p "$E/heat/environment.d" "$E/heat/templates"
cp "$PKG_ETC/heat/templates/"*.yaml "$E/heat/templates/"
# the global environment names its templates by absolute path
sed "s|file:///etc/heat/templates|file://$E/heat/templates|" "$PKG_ETC/heat/environment.d/default.yaml" \
    > "$E/heat/environment.d/default.yaml"
cat > "$E/heat/heat.conf" <<EOF
[DEFAULT]
debug = False
host = gt-heat
transport_url = $AMQP
region_name_for_services = RegionOne
# one engine process (the default is one per CPU, at least 4)
num_engine_workers = 1
# encrypts the stacks' credentials and hidden parameters in the DB; a test stack's fixed key
auth_encryption_key = gt-loopback-heat-auth-key-32byte
environment_dir = $E/heat/environment.d
template_dir = $E/heat/templates
stack_user_domain_name = heat
stack_domain_admin = heat_domain_admin
stack_domain_admin_password = heat_domain_admin
heat_metadata_server_url = http://$LB_IP:8000
heat_waitcondition_server_url = http://$LB_IP:8000/v1/waitcondition
[database]
connection = $DB/heat?$DB_OPTS
[paste_deploy]
api_paste_config = $E/heat/api-paste.ini
$(authtoken heat)
# Heat acts for the stack's owner later (deletes, signals) through a trust to this user
[trustee]
auth_type = password
auth_url = $LB_KEYSTONE_URL
user_domain_name = Default
username = heat
password = heat
[clients_keystone]
auth_uri = http://$LB_IP:5000
[oslo_concurrency]
lock_path = $D/heat/locks
$(policy)
EOF

# ---- clouds.yaml ---------------------------------------------------------------------
cloud() {  # cloud NAME USER PASSWORD PROJECT
    cat <<EOF
  $1:
    region_name: RegionOne
    identity_api_version: 3
    auth:
      auth_url: $LB_KEYSTONE_URL
      username: $2
      password: $3
      project_name: $4
      user_domain_name: Default
      project_domain_name: Default
EOF
}
{
    echo "# Written by scripts/loopback/configure.sh"
    echo "clouds:"
    cloud gt-admin admin admin admin
    cloud gt-service gpu-tenancy gpu-tenancy service
    cloud gt-alice alice alice tenant-a
    cloud gt-bob bob bob tenant-b
    cloud gt-rita rita rita tenant-a
} > "$LB_CLOUDS"

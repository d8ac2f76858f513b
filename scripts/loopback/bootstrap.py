"""Fill the freshly started loopback cloud with what the tests expect.

Run with the loopback venv's python; start.sh does it on the first start:

    python bootstrap.py identity    # keystone only: roles, projects, users, catalog
    python bootstrap.py resources   # needs nova, cinder, glance: quotas, the image
    python bootstrap.py networks    # needs neutron: "public", and a network + router per tenant
    python bootstrap.py isolation   # needs the computes in placement: the GPU hosts kept for lease flavors

Every step can be run again at any time: everything is looked up first and
only created or changed when missing. Credentials come from the ``gt-admin``
cloud of $OS_CLIENT_CONFIG_FILE (default: clouds.yaml in the state dir).
"""

import io
import os
import sys
import time

import openstack

# the clouds.yaml of the state dir, unless the caller points elsewhere
_STATE = os.environ.get("GT_LOOPBACK_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".loopback")
os.environ.setdefault("OS_CLIENT_CONFIG_FILE", os.path.join(_STATE, "clouds.yaml"))

IP = "127.0.0.1"
REGION = "RegionOne"
DOMAIN = "default"

# heat_stack_user: what Heat gives the users it makes for a stack's signals and
# wait conditions (heat.conf heat_stack_user_role); it must exist. No
# heat_stack_owner: with the legacy policy (below) any role but heat_stack_user
# may create stacks, so the plain members alice and bob can.
ROLES = ("admin", "member", "reader", "service", "heat_stack_user")
# OpenStack service users, all in project "service", password = user name
SERVICE_USERS = ("placement", "nova", "glance", "cinder", "neutron", "heat")
# Heat's own domain for stack users, and its admin (heat.conf stack_user_domain_name,
# stack_domain_admin; password = name)
HEAT_DOMAIN = "heat"
HEAT_DOMAIN_ADMIN = "heat_domain_admin"
# (user, password, project, roles)
PEOPLE = (
    ("gpu-tenancy", "gpu-tenancy", "service", ("admin", "service")),
    ("alice", "alice", "tenant-a", ("member", "reader")),
    ("bob", "bob", "tenant-b", ("member", "reader")),
    ("rita", "rita", "tenant-a", ("reader",)),
)
TENANTS = ("tenant-a", "tenant-b")
# (service name, type, URL); keystone registered itself during `keystone-manage bootstrap`
CATALOG = (
    ("placement", "placement", f"http://{IP}:8778"),
    ("nova", "compute", f"http://{IP}:8774/v2.1"),
    ("glance", "image", f"http://{IP}:9292"),
    ("cinderv3", "block-storage", f"http://{IP}:8776/v3/%(project_id)s"),
    ("neutron", "network", f"http://{IP}:9696"),
    ("heat", "orchestration", f"http://{IP}:8004/v1/%(project_id)s"),
    # the service under test; nothing listens here unless the tests start it
    ("gpu-tenancy", "gpu", f"http://{IP}:8779"),
)
IMAGE_NAME = "ubuntu-22.04"
IMAGE_BYTES = 1024 * 1024  # zeros: the fake hypervisor never reads it
# The external network, flat on physnet "public" (ml2_conf.ini), owned by admin
# and visible to every project: floating IPs come from its subnet.
PUBLIC = "public"
PUBLIC_CIDR = "172.24.4.0/24"
# Each tenant's own network <project>-net with subnet <project>-subnet, and a
# router <project>-router from it to "public" (what a floating IP needs).
PRIVATE_CIDRS = {"tenant-a": "10.1.0.0/24", "tenant-b": "10.2.0.0/24"}
# The GPU hosts sit in isolated aggregates, as ansible's cloud_prepare role sets
# them up: nova's scheduler ([scheduler] enable_isolated_aggregate_filtering,
# configure.sh) lets onto them only flavors that require the trait, which the
# service adds to its lease flavors (flavor_extra_specs). A public flavor with
# the PCI alias, or a tenant's plain one, finds no host.
ISOLATION_TRAIT = "CUSTOM_GPU_TENANCY"
GPU_AGGREGATES = {"gpu-tenancy-a100": ("A100", ("gpu-a100-1", "gpu-a100-2")),
                  "gpu-tenancy-h100": ("H100", ("gpu-h100-1",))}


def log(msg):
    print(f"[bootstrap] {msg}", flush=True)


def identity(conn):
    idn = conn.identity

    roles = {}
    for name in ROLES:
        roles[name] = idn.find_role(name) or idn.create_role(name=name)

    def project(name):
        return (idn.find_project(name, domain_id=DOMAIN)
                or idn.create_project(name=name, domain_id=DOMAIN, description="gpu-tenancy loopback"))

    def user(name, password, default_project):
        found = idn.find_user(name, domain_id=DOMAIN)
        if found:
            return found
        return idn.create_user(name=name, password=password, domain_id=DOMAIN,
                               default_project_id=default_project.id)

    def grant(proj, usr, role_names):
        for r in role_names:
            # PUT: a no-op when the assignment exists already
            idn.assign_project_role_to_user(proj, usr, roles[r])

    service = project("service")
    for name in TENANTS:
        project(name)
    for name in SERVICE_USERS:
        grant(service, user(name, name, service), ("admin", "service"))
    for name, password, proj_name, role_names in PEOPLE:
        proj = project(proj_name)
        grant(proj, user(name, password, proj), role_names)
    heat = idn.find_domain(HEAT_DOMAIN) or idn.create_domain(
        name=HEAT_DOMAIN, description="Heat's stack users (gpu-tenancy loopback)")
    heat_admin = idn.find_user(HEAT_DOMAIN_ADMIN, domain_id=heat.id) or idn.create_user(
        name=HEAT_DOMAIN_ADMIN, password=HEAT_DOMAIN_ADMIN, domain_id=heat.id)
    idn.assign_domain_role_to_user(heat, heat_admin, roles["admin"])
    log(f"roles {', '.join(ROLES)}; projects service, {', '.join(TENANTS)}; "
        f"users {', '.join(SERVICE_USERS + tuple(p[0] for p in PEOPLE))}; "
        f"domain {HEAT_DOMAIN} with {HEAT_DOMAIN_ADMIN}")

    for name, stype, url in CATALOG:
        svc = next(iter(idn.services(name=name)), None) or idn.create_service(
            name=name, type=stype, is_enabled=True)
        have = {ep.interface: ep for ep in idn.endpoints(service_id=svc.id)}
        for interface in ("public", "internal", "admin"):
            ep = have.get(interface)
            if ep is None:
                idn.create_endpoint(service_id=svc.id, interface=interface, url=url, region_id=REGION)
            elif ep.url != url:
                idn.update_endpoint(ep, url=url)
    log("catalog: " + ", ".join(f"{t}={u}" for _, t, u in CATALOG))


def resources(conn):
    idn = conn.identity
    for name in TENANTS:
        proj = idn.find_project(name, domain_id=DOMAIN, ignore_missing=False)
        conn.compute.update_quota_set(proj.id, instances=-1, cores=-1, ram=-1)
        conn.block_storage.update_quota_set(proj.id, volumes=1000, gigabytes=100000,
                                            snapshots=1000, backups=1000, backup_gigabytes=100000)
    log(f"quotas: nova instances/cores/ram unlimited, cinder 1000 volumes / 100000 GB for {', '.join(TENANTS)}")

    img = conn.image.find_image(IMAGE_NAME)
    if img is not None and img.status != "active":
        log(f"image {IMAGE_NAME} is {img.status}: uploading it again")
        conn.image.delete_image(img)
        img = None
    if img is None:
        img = conn.image.create_image(
            name=IMAGE_NAME, data=io.BytesIO(bytes(IMAGE_BYTES)), disk_format="raw",
            container_format="bare", visibility="public", allow_duplicates=True,
            os_distro="ubuntu", os_version="22.04")
        deadline = time.time() + 60
        while img.status != "active" and time.time() < deadline:
            time.sleep(0.5)
            img = conn.image.get_image(img.id)
    if img.status != "active":
        raise SystemExit(f"image {IMAGE_NAME} stuck in {img.status}")
    log(f"image {IMAGE_NAME} {img.id} public, {img.status}")


def networks(conn):
    net = conn.network
    admin_project = conn.current_project_id
    public = net.find_network(PUBLIC, project_id=admin_project) or net.create_network(
        name=PUBLIC, project_id=admin_project, is_router_external=True,
        provider_network_type="flat", provider_physical_network="public")
    public_subnet = _subnet(net, public, PUBLIC_CIDR, admin_project)
    log(f"network {PUBLIC} (external) {public.id}, subnet {public_subnet.cidr}")

    for name, cidr in PRIVATE_CIDRS.items():
        proj = conn.identity.find_project(name, domain_id=DOMAIN, ignore_missing=False)
        private = (net.find_network(f"{name}-net", project_id=proj.id)
                   or net.create_network(name=f"{name}-net", project_id=proj.id))
        subnet = _subnet(net, private, cidr, proj.id)
        router = net.find_router(f"{name}-router", project_id=proj.id)
        if router is None:
            router = net.create_router(name=f"{name}-router", project_id=proj.id,
                                       external_gateway_info={"network_id": public.id})
        if not any(ip["subnet_id"] == subnet.id
                   for p in net.ports(device_id=router.id) for ip in p.fixed_ips):
            net.add_interface_to_router(router, subnet_id=subnet.id)
        log(f"{name}: network {private.name} {subnet.cidr}, router {router.name} to {PUBLIC}")


def isolation(conn):
    placement, compute = conn.placement, conn.compute
    mv = "1.6"   # traits with the provider generation
    placement.put(f"/traits/{ISOLATION_TRAIT}", microversion=mv).raise_for_status()   # 201 or 204
    roots = {rp.name: rp.id for rp in placement.resource_providers() if not rp.parent_provider_id}
    for name, (model, hosts) in GPU_AGGREGATES.items():
        agg = compute.find_aggregate(name) or compute.create_aggregate(name=name)
        compute.set_aggregate_metadata(agg, {"gpu_model": model, f"trait:{ISOLATION_TRAIT}": "required"})
        for host in hosts:
            if host not in (agg.hosts or []):
                agg = compute.add_host_to_aggregate(agg, host)   # nova mirrors it into placement
            url = f"/resource_providers/{roots[host]}/traits"
            have = placement.get(url, microversion=mv).json()
            if ISOLATION_TRAIT not in have["traits"]:
                placement.put(url, microversion=mv, json={
                    "traits": have["traits"] + [ISOLATION_TRAIT],
                    "resource_provider_generation": have["resource_provider_generation"]}).raise_for_status()
        log(f"aggregate {name}: {', '.join(hosts)} require trait {ISOLATION_TRAIT}")


def _subnet(net, network, cidr, project_id):
    """the network's subnet (named after it), made once"""
    name = network.name.removesuffix("-net") + "-subnet"
    return (net.find_subnet(name, network_id=network.id)
            or net.create_subnet(name=name, network_id=network.id, project_id=project_id,
                                 ip_version=4, cidr=cidr))


def main(argv):
    steps = {"identity": identity, "resources": resources, "networks": networks, "isolation": isolation}
    if not argv or any(a not in steps for a in argv):
        raise SystemExit(f"usage: bootstrap.py {{{'|'.join(steps)}}}...")
    conn = openstack.connect(cloud="gt-admin")
    for step in argv:
        steps[step](conn)


if __name__ == "__main__":
    main(sys.argv[1:])

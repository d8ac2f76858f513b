"""End-to-end check of a started loopback cloud, with openstacksdk only.

    .loopback/venv/bin/python scripts/loopback/smoke.py

1. a flavor with pci_passthrough:alias=a100:2, booted by admin with a token
   scoped to tenant-a and pinned with host=gpu-a100-1: ACTIVE on gpu-a100-1,
   owned by tenant-a, and placement holds 2 CUSTOM_PGPU_A100 for it on
   GPU providers under gpu-a100-1;
2. a flavor with h100:1, not pinned: the scheduler can only put it on gpu-h100-1;
3. both deleted: placement lets go of their allocations (polled: nova-compute
   frees them a moment after the server is gone from the API).
   Steps 1-2 boot with networks="none";
4. alice, a plain member of tenant-a, boots a100:2 on tenant-a-net: the port
   nova made is bound to the server's host, ACTIVE, with a fixed IP from the
   subnet that the server's addresses show; a floating IP from "public"
   associated with it shows there too; deleting the server deletes the port;
5. alice creates a Heat stack: a volume, a server of a plain (non-GPU) flavor on
   tenant-a-net and the volume's attachment: CREATE_COMPLETE, server ACTIVE,
   volume in-use on it; deleting the stack deletes them.

Everything it creates is named gt-smoke-* and deleted at the end (and at the
start, if an earlier run left something behind).
"""

import ipaddress
import os
import sys
import time

import openstack

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.environ.get("GT_LOOPBACK_DIR") or os.path.join(os.path.dirname(os.path.dirname(HERE)), ".loopback")
os.environ.setdefault("OS_CLIENT_CONFIG_FILE", os.path.join(STATE, "clouds.yaml"))

PREFIX = "gt-smoke-"
IMAGE = "ubuntu-22.04"
T0 = time.time()


def step(msg):
    print(f"[smoke {time.time() - T0:5.1f}s] {msg}", flush=True)


def check(cond, msg):
    if not cond:
        step("FAIL: " + msg)
        sys.exit(1)
    step("ok: " + msg)


def poll(fn, want, timeout=60, interval=0.5):
    """fn() until it returns `want`; the last value either way"""
    deadline = time.time() + timeout
    while True:
        got = fn()
        if got == want or time.time() > deadline:
            return got
        time.sleep(interval)


admin = openstack.connect(cloud="gt-admin")
idn = admin.identity
tenant_a = idn.find_project("tenant-a", domain_id="default", ignore_missing=False)

# The pinning API (host=...) is admin-only; an admin with a token scoped to the
# tenant's project makes servers that belong to the tenant.
idn.assign_project_role_to_user(tenant_a, idn.find_user("admin", domain_id="default", ignore_missing=False),
                                idn.find_role("admin", ignore_missing=False))
pinner = openstack.connect(
    auth_url=admin.auth["auth_url"], username="admin", password="admin", project_name="tenant-a",
    user_domain_name="Default", project_domain_name="Default", region_name="RegionOne")
check(pinner.current_project_id == tenant_a.id, "admin authenticated with a token scoped to tenant-a")


def placement_json(url):
    return admin.placement.get(url, microversion="1.39").json()


providers = {rp.id: rp for rp in admin.placement.resource_providers()}
host_of = {}  # GPU provider id -> host name
for rp in providers.values():
    if rp.parent_provider_id in providers:
        host_of[rp.id] = providers[rp.parent_provider_id].name


def gpu_allocations(server_id):
    """{(host, resource class): amount} of GPUs placement holds for the server"""
    out = {}
    for rp_id, alloc in placement_json(f"/allocations/{server_id}")["allocations"].items():
        for rc, n in alloc["resources"].items():
            if rc.startswith("CUSTOM_PGPU_"):
                key = (host_of.get(rp_id, rp_id), rc)
                out[key] = out.get(key, 0) + n
    return out


def gpus_in_use():
    used = 0
    for rp_id in host_of:
        used += sum(placement_json(f"/resource_providers/{rp_id}/usages")["usages"].values())
    return used


def cleanup():
    alice_ = openstack.connect(cloud="gt-alice")
    for st in alice_.orchestration.stacks():
        # a deleted stack stays listed as DELETE_COMPLETE a moment: deleting it again makes heat-engine log errors
        if st.name.startswith(PREFIX) and st.status != "DELETE_COMPLETE":
            alice_.orchestration.delete_stack(st)
            alice_.orchestration.wait_for_delete(st, interval=1, wait=120)
            step(f"deleted stack {st.name}")
    for s in admin.compute.servers(all_projects=True):
        if s.name.startswith(PREFIX):
            admin.compute.delete_server(s)
            admin.compute.wait_for_delete(s, interval=1, wait=120)
            step(f"deleted server {s.name}")
    for fip in admin.network.ips(description=PREFIX + "fip"):
        admin.network.delete_ip(fip)
    for f in admin.compute.flavors(is_public=None):
        if f.name.startswith(PREFIX):
            admin.compute.delete_flavor(f)


cleanup()
check(poll(gpus_in_use, 0) == 0, f"no GPU in use before the test ({len(host_of)} GPU providers)")

image = admin.image.find_image(IMAGE, ignore_missing=False)


def gpu_flavor(name, alias):
    f = admin.compute.create_flavor(name=PREFIX + name, ram=1024, vcpus=2, disk=1)
    # the GPU hosts' isolated aggregates let in only flavors that require the trait (bootstrap.py isolation)
    admin.compute.create_flavor_extra_specs(f, {"pci_passthrough:alias": alias,
                                                "trait:CUSTOM_GPU_TENANCY": "required"})
    return f


def boot(name, flavor, **kw):
    t = time.time()
    s = pinner.compute.create_server(name=PREFIX + name, flavor_id=flavor.id, image_id=image.id,
                                     networks="none", **kw)
    s = pinner.compute.wait_for_server(s, status="ACTIVE", failures=["ERROR"], interval=0.5, wait=180)
    return admin.compute.get_server(s.id), time.time() - t


# ---- 1. a100:2 pinned to gpu-a100-1 ----
a100x2 = gpu_flavor("a100x2", "a100:2")
s1, dt = boot("a100x2", a100x2, host="gpu-a100-1")
check(s1.status == "ACTIVE" and s1.compute_host == "gpu-a100-1" and s1.project_id == tenant_a.id,
      f"a100:2 pinned with host=gpu-a100-1 -> ACTIVE on {s1.compute_host}, owned by tenant-a ({dt:.1f}s)")
alloc = poll(lambda: gpu_allocations(s1.id), {("gpu-a100-1", "CUSTOM_PGPU_A100"): 2}, timeout=20)
check(alloc == {("gpu-a100-1", "CUSTOM_PGPU_A100"): 2},
      f"placement: 2 CUSTOM_PGPU_A100 on gpu-a100-1 allocated to it ({alloc})")

# ---- 2. h100:1, scheduled freely ----
h100x1 = gpu_flavor("h100x1", "h100:1")
s2, dt = boot("h100x1", h100x1)
check(s2.status == "ACTIVE" and s2.compute_host == "gpu-h100-1",
      f"h100:1 (not pinned) -> ACTIVE on {s2.compute_host} ({dt:.1f}s)")
alloc = poll(lambda: gpu_allocations(s2.id), {("gpu-h100-1", "CUSTOM_PGPU_H100"): 1}, timeout=20)
check(alloc == {("gpu-h100-1", "CUSTOM_PGPU_H100"): 1}, f"placement: 1 CUSTOM_PGPU_H100 on gpu-h100-1 ({alloc})")
check(poll(gpus_in_use, 3) == 3, "3 GPUs in use in all")

# ---- 3. delete, allocations released ----
t = time.time()
for s in (s1, s2):
    pinner.compute.delete_server(s)
for s in (s1, s2):
    pinner.compute.wait_for_delete(s, interval=0.5, wait=120)
released = poll(lambda: (gpu_allocations(s1.id), gpu_allocations(s2.id), gpus_in_use()), ({}, {}, 0), timeout=60)
check(released == ({}, {}, 0), f"servers deleted -> their GPU allocations released ({time.time() - t:.1f}s)")

# ---- 4. a tenant's boot on its network ----
alice = openstack.connect(cloud="gt-alice")
net = alice.network.find_network("tenant-a-net", ignore_missing=False)
subnet = alice.network.find_subnet("tenant-a-subnet", ignore_missing=False)
t = time.time()
s4 = alice.compute.create_server(name=PREFIX + "net", flavor_id=a100x2.id, image_id=image.id,
                                 networks=[{"uuid": net.id}])
s4 = alice.compute.wait_for_server(s4, status="ACTIVE", failures=["ERROR"], interval=0.5, wait=180)
s4 = admin.compute.get_server(s4.id)
ports = list(admin.network.ports(device_id=s4.id))
check(len(ports) == 1, f"a100:2 on tenant-a-net by alice -> ACTIVE on {s4.compute_host}, 1 port ({time.time() - t:.1f}s)")
port = ports[0]
check(port.status == "ACTIVE" and port.binding_host_id == s4.compute_host and port.binding_vif_type == "ovs",
      f"port {port.status}, bound to {port.binding_host_id} ({port.binding_vif_type}), "
      f"security groups {len(port.security_group_ids)}")
fixed = port.fixed_ips[0]["ip_address"]
check(ipaddress.ip_address(fixed) in ipaddress.ip_network(subnet.cidr),
      f"fixed IP {fixed} from {subnet.name} {subnet.cidr}")


def addresses(kind):
    return [a["addr"] for a in alice.compute.get_server(s4.id).addresses.get(net.name, [])
            if a.get("OS-EXT-IPS:type") == kind]


check(addresses("fixed") == [fixed], f"server addresses: {net.name} fixed {fixed}")
public = alice.network.find_network("public", ignore_missing=False)
fip = alice.network.create_ip(floating_network_id=public.id, port_id=port.id, description=PREFIX + "fip")
got = poll(lambda: addresses("floating"), [fip.floating_ip_address], timeout=30)
check(got == [fip.floating_ip_address],
      f"floating IP {fip.floating_ip_address} from public associated -> in the server's addresses")
alice.compute.delete_server(s4)
alice.compute.wait_for_delete(s4, interval=0.5, wait=120)
check(poll(lambda: len(list(admin.network.ports(device_id=s4.id))), 0, timeout=30) == 0,
      "server deleted -> its port deleted")
alice.network.delete_ip(fip)

# ---- 5. a Heat stack of alice's ----
plain = admin.compute.create_flavor(name=PREFIX + "plain", ram=512, vcpus=1, disk=1)
# where the hosts' aggregates require a trait (GPU hosts kept for lease flavors), the flavor asks for it
required = {k: "required" for ag in admin.compute.aggregates() for k, v in (ag.metadata or {}).items()
            if k.startswith("trait:") and v == "required"}
if required:
    admin.compute.create_flavor_extra_specs(plain, required)
STACK = {
    "heat_template_version": "2021-04-16",
    "resources": {
        "volume": {"type": "OS::Cinder::Volume", "properties": {"size": 1}},
        "server": {"type": "OS::Nova::Server", "properties": {
            "flavor": plain.id, "image": image.id, "networks": [{"network": "tenant-a-net"}]}},
        "attachment": {"type": "OS::Cinder::VolumeAttachment", "properties": {
            "instance_uuid": {"get_resource": "server"}, "volume_id": {"get_resource": "volume"}}},
    },
    "outputs": {"server": {"value": {"get_resource": "server"}}, "volume": {"value": {"get_resource": "volume"}}},
}
t = time.time()
stack = alice.orchestration.create_stack(name=PREFIX + "stack", template=STACK, timeout_mins=3)
stack = alice.orchestration.wait_for_status(stack, "CREATE_COMPLETE", failures=["CREATE_FAILED"],
                                            interval=1, wait=180)
out = {o["output_key"]: o["output_value"] for o in stack.outputs}
s5, vol = admin.compute.get_server(out["server"]), admin.block_storage.get_volume(out["volume"])
check(s5.status == "ACTIVE" and vol.status == "in-use" and vol.attachments[0]["server_id"] == s5.id,
      f"Heat stack by alice -> CREATE_COMPLETE, server ACTIVE on {s5.compute_host}, "
      f"volume in-use on it ({time.time() - t:.1f}s)")
t = time.time()
alice.orchestration.delete_stack(stack)
alice.orchestration.wait_for_delete(stack, interval=1, wait=120)
check(admin.compute.find_server(s5.id, all_projects=True) is None
      and admin.block_storage.find_volume(vol.id, all_projects=True) is None,
      f"stack deleted -> its server and volume deleted ({time.time() - t:.1f}s)")

cleanup()
print(f"SMOKE PASSED in {time.time() - T0:.1f}s", flush=True)

"""The cloud_prepare role, for real against the loopback cloud: it makes the
service project, user and roles, the isolation trait, one isolated aggregate
per GPU model with the trait on its hosts' compute nodes, a standard image,
and the shapes and image in a running gpu-tenancy (keystone auth) through its
API; a second run changes nothing. Everything it made is removed after."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import select
from werkzeug.serving import make_server

from gpu_tenancy.app import create_app
from gpu_tenancy.cloud.openstack.connection import connect
from gpu_tenancy.config import Config
from gpu_tenancy.db import models as m
from gpu_tenancy.db.session import session_scope
from tests.ansible.playbook import REPO, require_ansible, run_playbook
from tests.integration.conftest import CLOUDS, KEYSTONE
from tests.ports import free_port

PLAYBOOK = REPO / "tests" / "ansible" / "playbooks" / "cloud-prepare-local.yml"
PREFIX = "gt-ansible-"
TRAIT = "CUSTOM_GT_ANSIBLE_TEST"
GPU_HOSTS = {"A100": ["gpu-a100-1", "gpu-a100-2"], "H100": ["gpu-h100-1"]}
SHAPES = [{"name": "a100.x2", "gpu_model": "A100", "gpus": 2, "vcpus": 2, "ram_mb": 1024, "disk_gb": 1,
           "pci_alias": "a100"},
          {"name": "h100.x1", "gpu_model": "H100", "gpus": 1, "vcpus": 1, "ram_mb": 512, "disk_gb": 1,
           "pci_alias": "h100"}]


@pytest.fixture
def service(db_url):
    """gpu-tenancy's API with keystone auth on the loopback cloud, served on 127.0.0.1."""
    config = Config.load(database_url=db_url, auth_strategy="keystone", run_engine=False,
                         keystone_authtoken={"www_authenticate_uri": KEYSTONE, "auth_url": KEYSTONE,
                                             "auth_type": "password", "username": "gpu-tenancy",
                                             "password": "gpu-tenancy", "project_name": "service",
                                             "user_domain_name": "Default", "project_domain_name": "Default"})
    app = create_app(config)
    port = free_port(range(18810, 18850))
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", app.extensions["gpu_tenancy"].sessions
    server.shutdown()
    app.extensions["gpu_tenancy"].sessions.kw["bind"].dispose()


def remove_everything(admin):
    placement = admin.placement
    for rp in placement.resource_providers():
        if rp.name in sum(GPU_HOSTS.values(), []):
            url = f"/resource_providers/{rp.id}/traits"
            body = placement.get(url, microversion="1.6").json()
            if TRAIT in body["traits"]:
                placement.put(url, json={"traits": [t for t in body["traits"] if t != TRAIT],
                                         "resource_provider_generation": body["resource_provider_generation"]},
                              microversion="1.6")
    for aggregate in admin.compute.aggregates():
        if aggregate.name.startswith(PREFIX):
            for host in aggregate.hosts or []:
                admin.compute.remove_host_from_aggregate(aggregate, host)
            admin.compute.delete_aggregate(aggregate, ignore_missing=True)
    placement.delete_trait(TRAIT, ignore_missing=True)
    for image in admin.image.images():
        if image.name.startswith(PREFIX):
            admin.image.delete_image(image, ignore_missing=True)
    user = admin.identity.find_user(PREFIX + "svc", domain_id="default")
    if user:
        admin.identity.delete_user(user)
    project = admin.identity.find_project(PREFIX + "svc", domain_id="default")
    if project:
        admin.identity.delete_project(project)


@pytest.fixture
def admin_conn():
    admin = connect("gt-admin", CLOUDS)
    remove_everything(admin)  # a crashed earlier run's leftovers
    yield admin
    remove_everything(admin)


def test_the_cloud_role_makes_what_the_service_needs_and_a_second_run_changes_nothing(
        admin_conn, service, tmp_path):
    require_ansible()
    url, sessions = service
    image_file = tmp_path / "image.raw"
    image_file.write_bytes(b"\0" * 65536)
    variables = {
        "cloud_prepare_cloud": "gt-admin", "cloud_prepare_service_project": PREFIX + "svc",
        "cloud_prepare_service_user": PREFIX + "svc", "cloud_prepare_service_password": "s3cret-pw",
        "cloud_prepare_service_roles": ["admin", "member"], "cloud_prepare_isolation_trait": TRAIT,
        "cloud_prepare_aggregate_prefix": PREFIX, "cloud_prepare_gpu_hosts": GPU_HOSTS,
        "cloud_prepare_images": [{"name": PREFIX + "ubuntu", "filename": str(image_file), "disk_format": "raw",
                                  "description": "a test image"}],
        "cloud_prepare_shapes": SHAPES, "cloud_prepare_service_url": url}
    env = {"OS_CLIENT_CONFIG_FILE": CLOUDS}
    first = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, env=env)
    assert first.returncode == 0, first.output[-6000:]
    assert first.changed() == 9  # every task that makes something: project, user, roles, trait, aggregates,
    # compute node traits, image, shapes, catalog image

    admin = admin_conn
    project = admin.identity.find_project(PREFIX + "svc", domain_id="default", ignore_missing=False)
    user = admin.identity.find_user(PREFIX + "svc", domain_id="default", ignore_missing=False)
    assert user.default_project_id == project.id
    roles = {admin.identity.get_role(a.role["id"]).name
             for a in admin.identity.role_assignments(user_id=user.id, scope_project_id=project.id)}
    assert roles == {"admin", "member"}
    connect_as = connect("gt-admin", CLOUDS)  # the new user's password works
    assert connect_as.identity.find_user(user.id)
    assert admin.placement.get_trait(TRAIT)
    aggregates = {a.name: a for a in admin.compute.aggregates() if a.name.startswith(PREFIX)}
    assert {n: sorted(a.hosts) for n, a in aggregates.items()} == {
        PREFIX + "a100": ["gpu-a100-1", "gpu-a100-2"], PREFIX + "h100": ["gpu-h100-1"]}
    assert aggregates[PREFIX + "a100"].metadata == {"gpu_model": "A100", f"trait:{TRAIT}": "required"}
    for rp in admin.placement.resource_providers():
        traits = admin.placement.get(f"/resource_providers/{rp.id}/traits", microversion="1.6").json()["traits"]
        assert (TRAIT in traits) == (rp.name in sum(GPU_HOSTS.values(), [])), rp.name
    image = admin.image.find_image(PREFIX + "ubuntu", ignore_missing=False)
    assert image.status == "active" and image.visibility == "public"
    with session_scope(sessions) as session:
        shapes = {s.name: (s.gpu_model, s.gpus, s.pci_alias) for s in session.scalars(select(m.Shape))}
        catalog = {i.name: i.cloud_ref for i in session.scalars(select(m.Image))}
    assert shapes == {"a100.x2": ("A100", 2, "a100"), "h100.x1": ("H100", 1, "h100")}
    assert catalog == {PREFIX + "ubuntu": image.id}

    second = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, env=env)
    assert second.returncode == 0, second.output[-6000:]
    assert second.changed() == 0, second.output[-6000:]

    # a shape that exists with other values is an error, not a silent change
    variables.update(cloud_prepare_shapes=[{**SHAPES[0], "vcpus": 8}], cloud_prepare_gpu_hosts={},
                     cloud_prepare_images=[])
    third = run_playbook(PLAYBOOK, "localhost,", variables, tmp_path, env=env)
    assert third.returncode != 0
    assert "shape a100.x2 exists with other values" in third.output


def test_the_service_flavors_carry_the_isolation_trait_when_configured(projects):
    """With the GPU hosts in isolated aggregates, the service's flavors must require the
    trait; flavor_extra_specs (set by the deploy role's config) adds it to each lease's."""
    import uuid

    from gpu_tenancy.cloud.driver import ShapeSpec
    from gpu_tenancy.cloud.openstack import OpenStackCloud
    cloud = OpenStackCloud(connect("gt-service", CLOUDS), resource_classes={}, network="none",
                           flavor_extra_specs={f"trait:{TRAIT}": "required"})
    a, lease = projects["tenant-a"], str(uuid.uuid4())
    shape = ShapeSpec("itest.isolated", "A100", 1, 1, 512, 1, "a100")
    cloud.ensure_lease_class(lease)
    flavor = cloud.ensure_lease_flavor(lease, a, shape)
    try:
        specs = connect("gt-admin", CLOUDS).compute.get_flavor(flavor.id, get_extra_specs=True).extra_specs
        assert specs[f"trait:{TRAIT}"] == "required" and specs["pci_passthrough:alias"] == "a100:1"
        assert cloud.ensure_lease_flavor(lease, a, shape) == flavor  # same specs: reused
    finally:
        cloud.remove_lease_flavor(lease)
        cloud.remove_lease_class(lease)

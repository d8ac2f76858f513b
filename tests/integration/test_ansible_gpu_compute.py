"""The nova config the gpu_compute role writes, loaded with nova's own options
and parsers (nova as installed in the loopback cloud's venv): what nova makes of
the device specs, aliases, scheduler settings and the provider config."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.ansible.playbook import REPO, require_ansible, run_playbook

PLAYBOOK = REPO / "tests" / "ansible" / "playbooks" / "gpu-compute-local.yml"
CHECK = REPO / "tests" / "ansible" / "nova_config_check.py"


@pytest.fixture(scope="module")
def nova_python() -> Path:
    loopback = os.environ.get("GT_LOOPBACK_DIR")
    python = Path(loopback) / "venv" / "bin" / "python" if loopback else None
    if python is None or not python.exists():
        pytest.skip("no loopback venv with nova (GT_LOOPBACK_DIR/venv)")
    return python


def render(tmp_path: Path, groups: list[str], models: list[str]) -> dict[str, Path]:
    require_ansible()
    paths = {"compute": tmp_path / "nova.conf.d" / "50-gpu-tenancy.conf",
             "scheduler": tmp_path / "nova.conf.d" / "50-gpu-tenancy-scheduler.conf",
             "providers": tmp_path / "provider_config", "grub": tmp_path / "grub.cfg",
             "modprobe": tmp_path / "vfio.conf"}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {g: {"hosts": {"localhost": {}}} for g in groups}}}))
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True).stdout.strip()
    run = run_playbook(PLAYBOOK, inventory, {
        "gpu_compute_models": models, "gpu_compute_apply_boot_config": False, "gpu_compute_restart_nova": False,
        "gpu_compute_owner": user, "gpu_compute_group": group,
        "gpu_compute_nova_conf": str(paths["compute"]), "gpu_compute_scheduler_conf": str(paths["scheduler"]),
        "gpu_compute_provider_config_dir": str(paths["providers"]), "gpu_compute_grub_file": str(paths["grub"]),
        "gpu_compute_modprobe_file": str(paths["modprobe"]),
        "gpu_compute_modules_load_file": str(tmp_path / "modules.conf")}, tmp_path)
    assert run.returncode == 0, run.output
    return paths


def nova_sees(python: Path, providers: Path, *files: Path) -> dict:
    done = subprocess.run([str(python), "-W", "ignore", str(CHECK), str(providers), *map(str, files)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_compute_host_config_as_nova_reads_it(nova_python, tmp_path):
    paths = render(tmp_path, ["gpu_compute"], ["A100", "H100"])
    seen = nova_sees(nova_python, paths["providers"], paths["compute"])
    assert seen["report_in_placement"] is True
    assert seen["device_specs"] == [
        {"vendor_id": "10de", "product_id": "20b5", "tags": {"resource_class": "CUSTOM_PGPU_A100"}},
        {"vendor_id": "10de", "product_id": "2330", "tags": {"resource_class": "CUSTOM_PGPU_H100"}}]
    assert set(seen["aliases"]) == {"a100", "h100"}
    assert seen["aliases"]["a100"][0]["resource_class"] == "CUSTOM_PGPU_A100"
    assert seen["provider_config_location"] == str(paths["providers"])
    assert seen["provider_traits"] == {"$COMPUTE_NODE": ["CUSTOM_GPU_TENANCY"]}
    assert "vfio-pci.ids=10de:20b5,10de:2330" in paths["grub"].read_text()
    assert "iommu=pt" in paths["grub"].read_text()
    assert "options vfio-pci ids=10de:20b5,10de:2330" in paths["modprobe"].read_text()


def test_a_host_that_is_compute_and_scheduler_gives_nova_each_alias_once(nova_python, tmp_path):
    paths = render(tmp_path, ["gpu_compute", "nova_scheduler"], ["A100"])
    seen = nova_sees(nova_python, paths["providers"], paths["compute"], paths["scheduler"])
    assert seen["pci_in_placement"] is True and seen["isolated_aggregates"] is True
    assert "PciPassthroughFilter" in seen["enabled_filters"]
    # every model the role knows, so any shape's alias resolves on the API and scheduler
    assert {"a100", "h100", "l40s", "mi210"} <= set(seen["aliases"])
    assert all(len(specs) == 1 for specs in seen["aliases"].values())


def test_an_unknown_gpu_model_stops_the_run(tmp_path):
    require_ansible()
    run = run_playbook(PLAYBOOK, "localhost,", {"gpu_compute_models": ["V100-NOPE"],
                                                "gpu_compute_nova_conf": str(tmp_path / "x.conf")}, tmp_path)
    assert run.returncode != 0
    assert "unknown GPU model(s) V100-NOPE" in run.output
    assert not (tmp_path / "x.conf").exists()

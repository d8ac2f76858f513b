"""The benches' --against export (bench/git_export.py) runs a ref as installed: its compiled scan
index built, so a side-by-side run compares the two refs' planners, not the compiled index
with the Python one."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.scan_index_built import require_scan_index

BENCH = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
sys.path.insert(0, BENCH)

from git_export import export_ref  # noqa: E402


def test_an_exported_ref_runs_its_own_compiled_scan_index(tmp_path):
    require_scan_index()   # (a compiler here: the export builds with it)
    out = export_ref("HEAD", str(tmp_path / "ref"), ("service",))
    service = os.path.join(out, "service")
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from gpu_tenancy.domain import scan_index, _scan_index; "
             "print(scan_index.available, _scan_index.__file__)")
    r = subprocess.run([sys.executable, "-c", probe, service], capture_output=True, text=True, check=True,
                       cwd=str(tmp_path))
    available, where = r.stdout.split()
    assert available == "True"
    assert os.path.realpath(where).startswith(os.path.realpath(service) + os.sep)

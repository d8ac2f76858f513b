"""A git ref's code exported for a side-by-side run (the benches' --against), with its compiled
scan index built as an install would build it: a ref exported without it would run the Python
index, and the comparison would measure the index, not the change."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCAN_INDEX = os.path.join("service", "gpu_tenancy", "domain", "scan_index.c")

# setuptools builds the one extension in place, as setup.py declares it (the export holds only `parts`, not setup.py)
_BUILD = ("import setuptools; setuptools.setup(name='ref', script_args=['-q', 'build_ext', '--inplace'], "
          "package_dir={'': 'service'}, ext_modules=[setuptools.Extension("
          "'gpu_tenancy.domain._scan_index', [%r])])" % SCAN_INDEX)


def export_ref(ref: str, into: str, parts: tuple[str, ...] = ("bench", "service")) -> str:
    """`parts` of git ref `ref` under `into` (made if missing); returns `into`. Where the ref has
    the scan index's source it is compiled (a failure to compile stops the run)."""
    os.makedirs(into, exist_ok=True)
    archive = subprocess.run(["git", "-C", REPO, "archive", ref, *parts], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    if "service" in parts and os.path.exists(os.path.join(into, SCAN_INDEX)):
        subprocess.run([sys.executable, "-c", _BUILD], cwd=into, check=True, capture_output=True)
    return into


def figures_of_ref(ref: str, script: str, args: list[str]) -> dict:
    """What `script` (a bench of this tree) prints as JSON, its last line, when run with `ref`'s
    service code (GT_BENCH_SERVICE) and `args` (which ask it for --json)."""
    with tempfile.TemporaryDirectory() as into:
        export_ref(ref, into)
        env = {**os.environ, "GT_BENCH_SERVICE": os.path.join(into, "service")}
        done = subprocess.run([sys.executable, os.path.abspath(script), *args], env=env, check=True,
                              capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
